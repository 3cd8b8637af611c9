"""kopf glue: the indexes of what exists and the triggers that kick the `controller.Controller`.

Every handler is a line or two: an index keeps a view of each object (`podview.view_pod`,
`podview.view_child`, the job without kopf's bookkeeping); an event kicks the job's reconcile. Triggers: a
job listed, added, deleted or with an unobserved spec generation, any event of a job's pod, Service,
Deployment, NetworkPolicy or ConfigMap. The controller adds the periodic resync and the wake-ups plans ask for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf

from agents_operator import controller as ctl
from agents_operator import naming, podview
from agents_operator.controller import Controller, Key

JOBS = (naming.GROUP, naming.VERSION, naming.PLURAL)
OURS = {naming.LABEL_JOB: kopf.PRESENT}


@dataclass(frozen=True)
class Child:
    """One kind of child: what kopf watches (labelled with the job's name), its ids, the view its index keeps."""

    resource: tuple[str, ...]
    index: str
    event: str
    view: Callable[[kopf.Body], podview.PodView | podview.ChildView | None]


CHILDREN = (
    Child(("v1", "pods"), ctl.INDEX_PODS, "pod-event", podview.view_pod),
    Child(("v1", "services"), ctl.INDEX_SERVICES, "service-event", podview.view_child),
    Child(("apps", "v1", "deployments"), ctl.INDEX_DEPLOYMENTS, "deployment-event", podview.view_child),
    Child(
        ("networking.k8s.io", "v1", "networkpolicies"),
        ctl.INDEX_NETWORK_POLICIES,
        "networkpolicy-event",
        podview.view_child,
    ),
    Child(("v1", "configmaps"), ctl.INDEX_CONFIG_MAPS, "configmap-event", podview.view_child),
)


def _job_value(body: kopf.Body) -> dict:
    """What the jobs index keeps of a job: the object without kopf's bookkeeping."""
    meta = body.get("metadata") or {}
    keep = ("name", "namespace", "uid", "generation", "labels", "annotations", "ownerReferences", "deletionTimestamp")
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": copy.deepcopy({k: meta[k] for k in keep if k in meta}),
        "spec": copy.deepcopy(dict(body.get("spec") or {})),
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }


def _spec_unobserved(body: kopf.Body) -> bool:
    generation = (body.get("metadata") or {}).get("generation")
    return generation is not None and generation != (body.get("status") or {}).get("observedGeneration")


def _key(body: kopf.Body) -> Key | None:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(naming.LABEL_JOB)
    return (meta.get("namespace") or "default", job) if job else None


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Every handler of the operator, on `registry`."""
    _register_jobs(registry, controller)
    for child in CHILDREN:
        _register_children(registry, controller, child)

    @kopf.on.probe(id="jobs", registry=registry)
    async def jobs_probe(**_: Any) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in controller.states():
            counts[state or "Unknown"] = counts.get(state or "Unknown", 0) + 1
        return counts

    @kopf.on.cleanup(id="stop", registry=registry)
    async def stop(**_: Any) -> None:
        await controller.shutdown()


def _register_jobs(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    @kopf.index(*JOBS, id=ctl.INDEX_JOBS, registry=registry)
    async def agents_jobs(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
        return {(namespace, name): _job_value(body)}

    @kopf.on.event(*JOBS, id="job-event", registry=registry)
    async def job_event(type: str | None, body: kopf.Body, namespace: str, name: str, **kwargs: Any) -> None:
        """A job listed at start-up, created, deleted, or with a spec not yet reconciled: reconcile it.

        No kopf create/update handlers: those keep state in annotations of every job (a patch each, and a
        diff of the whole job on every event); `metadata.generation` against `status.observedGeneration`
        tells a spec change apart from the operator's own status writes without either."""
        controller.remember_indexes(kwargs)
        key = (namespace, name)
        if type == "DELETED":
            controller.forget(key)
            controller.kick(key)  # the children of a job that is gone: cleaned up as orphans
        elif type in (None, "ADDED") or _spec_unobserved(body):
            controller.kick(key)


def _register_children(registry: kopf.OperatorRegistry, controller: Controller, child: Child) -> None:
    """The index of one kind of child, and its events kicking the child's job."""

    @kopf.index(*child.resource, labels=OURS, id=child.index, registry=registry)
    async def children(body: kopf.Body, **_: Any) -> dict:
        key, view = _key(body), child.view(body)
        return {key: view} if key and view else {}

    @kopf.on.event(*child.resource, labels=OURS, id=child.event, registry=registry)
    async def child_event(body: kopf.Body, **kwargs: Any) -> None:
        controller.remember_indexes(kwargs)
        key = _key(body)
        if key:
            controller.kick(key)
