"""What the spec asks for and what is there: slots, the pods in them, the other children. Pure module.

An executor hands in what it sees as plain dicts or `status` views (the operator: kopf's indexes; the local
launcher: views of its processes); `observe` sorts them into the job's slots and names what does not belong.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agents_operator import api, naming, podview, render
from agents_operator.api import AgentsJobStatus, ReplicaStatus
from agents_operator.podview import POD_ACTIVE, POD_FAILED, POD_SUCCEEDED, ChildView, PodView
from agents_operator.reconcile.actions import KIND_DEPLOYMENT, KIND_POD, KIND_SERVICE, Delete

Slot = tuple[str, int]
"""(replica type, index) of one pod."""

# --- what the spec asks for --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Desired:
    """What a job's spec asks for, short of the pods themselves: its slots and its other children.

    Pods are rendered by the plan only for the slots that are empty (see `render.non_pod_children`).
    """

    slots: tuple[Slot, ...]
    """(type, index) of every pod, in the order `topology.Topology.slots` gives (creates follow it)."""
    others: dict[tuple[str, str], dict]
    """Every other child by (kind, name), in render order. Shared between plans: copied into a Create."""
    elastic: bool = False
    """The worker count may change (spec.elastic): workers past it, and their env servers, were scaled away."""

    @classmethod
    def of(cls, job: api.AgentsJob, options: render.RenderOptions) -> Desired:
        others = {(c["kind"], c["metadata"]["name"]): c for c in render.non_pod_children(job, options)}
        return cls(tuple(job.topology.slots()), others, job.spec.elastic is not None)


class DesiredCache:
    """One job's `Desired`, kept while what it is rendered from stays the same.

    The operator plans again on every event of any of a job's pods; rendering its Services each time would
    cost time linear in the replicas per event. The Controller keeps one cache per job and hands it to
    `plan`. The key is what rendering reads, as given: the job's identity, its spec as written and the
    render options. (metadata.generation stands for the spec on a real API server, but an emulated one
    need not set it; and a parsed spec is no key: an explicit null override compares equal to an unset one,
    yet renders differently.)
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._desired: Desired | None = None

    def get(self, job: Mapping[str, Any], parsed: api.AgentsJob, options: render.RenderOptions) -> Desired:
        """The Desired of `parsed`, which is `job` parsed."""
        meta = job.get("metadata") or {}
        key = (meta.get("uid"), meta.get("name"), meta.get("namespace"), job.get("spec"), options)
        if self._desired is None or key != self._key:
            self._key, self._desired = copy.deepcopy(key), Desired.of(parsed, options)
        return self._desired


# --- what is there -----------------------------------------------------------------------------------------


@dataclass
class Observed:
    """The job's pods by slot and its other children by (kind, name); `strays` are to be deleted."""

    slots: dict[Slot, PodView] = field(default_factory=dict)
    children: dict[tuple[str, str], ChildView] = field(default_factory=dict)
    strays: list[Delete] = field(default_factory=list)


def observe(
    job: str,
    uid: str | None,
    desired: Desired,
    pods: Iterable[Mapping | PodView],
    services: Iterable[Mapping | ChildView] = (),
    deployments: Iterable[Mapping | ChildView] = (),
) -> Observed:
    """Sort what is seen of job `job` (uid `uid`) into slots and children.

    Strays (a pod in no slot of the spec) and leftovers of an earlier job of the same name (another owner
    uid) are to be deleted; a leftover in one of the slots blocks its name until it is gone, so it is kept
    there as terminating.
    """
    seen = Observed()
    expected = set(desired.slots)
    for raw in pods:
        pod = raw if isinstance(raw, PodView) else podview.view_pod(raw, job)
        if pod is None:
            continue
        foreign = bool(uid and pod.owner_uid and pod.owner_uid != uid)
        if not foreign and pod.slot in expected:
            seen.slots[pod.slot] = pod
            continue
        if not pod.terminating:
            seen.strays.append(Delete(KIND_POD, pod.name, _why_stray(pod, foreign, desired)))
        if pod.slot in expected:
            seen.slots[pod.slot] = replace(pod, terminating=True)
    for raw, kind in [*((s, KIND_SERVICE) for s in services), *((d, KIND_DEPLOYMENT) for d in deployments)]:
        child = _as_child(raw, job, kind)
        if child is None:
            continue
        if uid and child.owner_uid and child.owner_uid != uid and not child.terminating:
            seen.strays.append(Delete(child.kind, child.name, "owned by an earlier job of the same name"))
            child = replace(child, terminating=True)
        seen.children[child.kind, child.name] = child
    return seen


def _why_stray(pod: PodView, foreign: bool, desired: Desired) -> str:
    if foreign:
        return "owned by an earlier job of the same name"
    if desired.elastic and pod.replica_type in (naming.WORKER, naming.ENV_SERVER):
        workers = sum(1 for t, _ in desired.slots if t == naming.WORKER)
        return f"scaled to {workers} worker(s) (replicaSpecs.worker.replicas)"
    return "not a replica of the spec"


def _as_child(obj: Mapping | ChildView, job: str, kind: str) -> ChildView | None:
    if isinstance(obj, ChildView):
        return obj
    view = podview.view_child(obj, job)
    return replace(view, kind=view.kind or kind) if view else None


def replica_statuses(
    job: api.AgentsJob, pods: Mapping[Slot, PodView], prev: AgentsJobStatus | None = None
) -> dict[str, ReplicaStatus]:
    """Pods by replica type and state. With `prev` (a finished job), counts never drop below what it saw:
    cleanup removes pods, not what they did."""
    out = {}
    types = [t for t, _ in job.spec.replica_specs.items()]
    if job.topology.remote_servers:
        types.append(naming.ENV_SERVER)
    for replica_type in types:
        views = [p for p in pods.values() if p.replica_type == replica_type]
        counts = {s: sum(1 for p in views if p.state == s) for s in (POD_ACTIVE, POD_SUCCEEDED, POD_FAILED)}
        if prev is not None:
            before = prev.replica_statuses.get(replica_type) or ReplicaStatus()
            counts[POD_SUCCEEDED] = max(counts[POD_SUCCEEDED], before.succeeded)
            counts[POD_FAILED] = max(counts[POD_FAILED], before.failed)
        out[replica_type] = ReplicaStatus(
            active=counts[POD_ACTIVE], succeeded=counts[POD_SUCCEEDED], failed=counts[POD_FAILED]
        )
    return out
