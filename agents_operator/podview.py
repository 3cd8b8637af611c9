"""What the operator observes of the job's pods and other children, as plain values: `reconcile.plan` reads
the cluster only through these views, so every decision it makes is a function of (spec, views, previous
status, now) and can be tested with plain dicts. Pure module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agents_operator import naming
from agents_operator.jobstatus import parse_time

ANNOTATION_COUNTED = f"{naming.GROUP}/restart-counted"
"""Set on a failed pod once its failure is counted in status.restarts (the value is the count after it).

The marker lives on the pod so that counting is idempotent: an operator restarted between counting a failure
and deleting the pod (or reading a stale cache) sees the marker and does not count the same failure twice.
"""

POD_ACTIVE, POD_SUCCEEDED, POD_FAILED, POD_TERMINATING = "active", "succeeded", "failed", "terminating"
"""What a pod means to the lifecycle (`PodView.state`)."""
PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED = "Pending", "Running", "Succeeded", "Failed"
"""Pod phases as the kubelet reports them (and the local launcher, for its processes)."""
UNSCHEDULABLE = "Unschedulable"
"""The scheduler's reason (condition PodScheduled False) for a pod that no node fits."""
CANNOT_START = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
        "PreStartHookError",
        "PostStartHookError",
    }
)
"""The kubelet's reasons for a container waiting on a failure, not on a step of its start (ContainerCreating,
PodInitializing): the job says so (condition ReplicaFailure) until the pod starts."""
MESSAGE_CHARS = 300
"""How much of a failed container's last line a condition quotes."""
NEVER_STARTS = frozenset({"ErrImageNeverPull", "InvalidImageName"})
"""Of those, the ones no retry of the kubelet's can end: such a pod counts as failed and its replica's
restartPolicy decides (it is replaced, or the job fails)."""
START_WARNINGS = frozenset(
    {
        "FailedMount",
        "FailedAttachVolume",
        "FailedMapVolume",
        "FailedCreatePodSandBox",
        "FailedCreatePodContainer",
    }
)
"""The Warning Events the kubelet (and the attach/detach controller) post for a scheduled pod whose containers
cannot be created: a ConfigMap, Secret or claim it cannot mount, a sandbox the runtime or the network plugin
cannot set up. The pod's own status says only ContainerCreating; these Events are where the reason is."""
START_PATIENCE = 10.0
"""Seconds a pod may stay Pending with nothing said before the operator reads its Warning Events."""
WARNING_WINDOW = 180.0
"""Seconds a Warning Event explains a wait: the kubelet repeats one at least every ~2 min while its cause lasts."""


@dataclass(frozen=True)
class PodView:
    """The few facts about one of the job's pods that reconcile needs."""

    name: str
    replica_type: str
    index: int
    phase: str
    """Pending, Running, Succeeded, Failed or Unknown."""
    terminating: bool = False
    """deletionTimestamp is set: the pod is going away; it neither succeeds nor fails any more."""
    exit_code: int | None = None
    """Exit code of the trainer container (or the first failed one); None when no container terminated."""
    reason: str | None = None
    """Pod or container reason (Evicted, OOMKilled, Error, ...)."""
    message: str | None = None
    """What the failed container said last: its termination message's last line (the end of its log, as
    render asks with TERMINATION_MESSAGE_POLICY), or the pod's message (an eviction's)."""
    owner_uid: str | None = None
    """uid of the controlling AgentsJob, when the pod has an owner reference."""
    counted: int | None = None
    """Value of ANNOTATION_COUNTED: this failure is already in status.restarts."""
    waiting: str | None = None
    """Why a pod that has not finished cannot start: the kubelet's reason (one of CANNOT_START), the
    scheduler's (UNSCHEDULABLE) or that of a Warning Event about it (START_WARNINGS, `explained`); None while
    it starts or runs as it should."""
    waiting_message: str | None = None
    """What the kubelet or the scheduler said with `waiting`, naming the container."""
    uid: str | None = None
    created: datetime | None = None
    """metadata.creationTimestamp: how long a Pending pod has waited."""

    @property
    def state(self) -> str:
        if self.terminating:
            return POD_TERMINATING
        if self.phase == PHASE_SUCCEEDED:
            return POD_SUCCEEDED
        if self.phase == PHASE_FAILED or self.waiting in NEVER_STARTS:
            return POD_FAILED
        return POD_ACTIVE

    @property
    def slot(self) -> tuple[str, int]:
        return self.replica_type, self.index


def _controller_uid(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == naming.KIND:
            return ref.get("uid")
    return None


def _exit(pod: Mapping[str, Any]) -> tuple[int | None, str | None, str | None]:
    """(exit code, reason, last line of the termination message) of a finished pod: the trainer container's
    when it failed, else any failed one."""
    status = pod.get("status") or {}
    statuses = list(status.get("containerStatuses") or [])
    statuses.sort(key=lambda c: c.get("name") != naming.TRAINER_CONTAINER)  # the trainer first
    terminated = [
        (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated") for c in statuses
    ]
    terminated = [t for t in terminated if t]
    failed = [t for t in terminated if t.get("exitCode")]
    chosen = failed[0] if failed else (terminated[0] if terminated else None)
    if chosen is None:
        return None, status.get("reason"), status.get("message")
    code = chosen.get("exitCode")
    said = [line.strip() for line in str(chosen.get("message") or "").splitlines() if line.strip()]
    message = said[-1][:MESSAGE_CHARS] if said else None
    return (int(code) if isinstance(code, int) else None), chosen.get("reason") or status.get("reason"), message


def _waiting(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(reason, message) of a pod that cannot start: its first container waiting on a failure, else the
    scheduler's Unschedulable; (None, None) when neither holds."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            return waiting[
                "reason"
            ], f"container {container.get('name')}: {waiting.get('message') or waiting['reason']}"
    for condition in status.get("conditions") or []:
        unscheduled = condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        if unscheduled and condition.get("reason") == UNSCHEDULABLE:
            return UNSCHEDULABLE, condition.get("message") or "no node fits the pod"
    return None, None


def view_pod(pod: Mapping[str, Any], job: str | None = None) -> PodView | None:
    """A pod as reconcile sees it, or None when it is not a replica pod (of `job`, when given)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(naming.LABEL_JOB) or (job is not None and labels[naming.LABEL_JOB] != job):
        return None
    child = naming.parse_child(labels)
    if child is None:
        return None
    replica_type, index = child
    name = meta.get("name") or ""
    if name != naming.child_name(labels[naming.LABEL_JOB], replica_type, index):
        return None  # our labels on a pod we did not name: not one of ours
    phase = (pod.get("status") or {}).get("phase") or PHASE_PENDING
    exit_code, reason, message = _exit(pod) if phase == PHASE_FAILED else (None, None, None)
    waiting, waiting_message = _waiting(pod) if phase in (PHASE_PENDING, PHASE_RUNNING) else (None, None)
    counted = (meta.get("annotations") or {}).get(ANNOTATION_COUNTED)
    return PodView(
        name=name,
        replica_type=replica_type,
        index=index,
        phase=phase,
        terminating=bool(meta.get("deletionTimestamp")),
        exit_code=exit_code,
        reason=reason,
        message=message,
        owner_uid=_controller_uid(meta),
        counted=int(counted) if counted and str(counted).isdigit() else None,
        waiting=waiting,
        waiting_message=waiting_message,
        uid=meta.get("uid"),
        created=parse_time(meta.get("creationTimestamp")),
    )


def unexplained(pod: PodView, now: datetime) -> bool:
    """A pod Pending for START_PATIENCE s with no reason in its status: its Warning Events may give one."""
    if pod.phase != PHASE_PENDING or pod.waiting or pod.terminating or pod.created is None:
        return False
    return (now - pod.created).total_seconds() >= START_PATIENCE


def explained(pod: PodView, events: Iterable[Mapping[str, Any]], now: datetime) -> PodView:
    """`pod` with the reason its Events give for its wait: the latest Warning in START_WARNINGS, seen in the
    last WARNING_WINDOW s and not followed by a Normal Event of the kubelet's (a pull, a create: the start
    went on past it). Unchanged when there is none. Events of an earlier pod of the same name (the slot's,
    before a restart) are told apart by uid."""
    warning: tuple[datetime, Mapping[str, Any]] | None = None
    progress: datetime | None = None
    for event in events:
        involved = event.get("involvedObject") or {}
        seen = _event_time(event)
        if seen is None or involved.get("name") != pod.name or (pod.uid and involved.get("uid") != pod.uid):
            continue
        if event.get("type") == "Warning" and event.get("reason") in START_WARNINGS:
            if warning is None or seen >= warning[0]:
                warning = (seen, event)
        elif event.get("type") == "Normal" and _from_kubelet(event):
            progress = seen if progress is None else max(progress, seen)
    if warning is None or (now - warning[0]).total_seconds() > WARNING_WINDOW:
        return pod
    if progress is not None and progress >= warning[0]:
        return pod
    event = warning[1]
    said = " ".join(str(event.get("message") or event["reason"]).split())[:MESSAGE_CHARS]
    return replace(pod, waiting=event["reason"], waiting_message=said)


def _from_kubelet(event: Mapping[str, Any]) -> bool:
    return "kubelet" in ((event.get("source") or {}).get("component"), event.get("reportingComponent"))


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    """When an Event (core/v1, as the kubelet posts them, or events.k8s.io) was last seen."""
    series = event.get("series") or {}
    for text in (series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime")):
        if seen := parse_time(text):
            return seen
    return parse_time((event.get("metadata") or {}).get("creationTimestamp"))


@dataclass(frozen=True)
class ChildView:
    """A Service or Deployment of the job: only its identity matters."""

    kind: str
    name: str
    terminating: bool = False
    owner_uid: str | None = None


def view_child(obj: Mapping[str, Any], job: str | None = None) -> ChildView | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(naming.LABEL_JOB) or (job is not None and labels[naming.LABEL_JOB] != job):
        return None
    return ChildView(
        kind=obj.get("kind") or "",
        name=meta.get("name") or "",
        terminating=bool(meta.get("deletionTimestamp")),
        owner_uid=_controller_uid(meta),
    )


def overlay(
    pods: Iterable[PodView], deleting: Iterable[str] = (), counted: Mapping[str, int] | None = None
) -> list[PodView]:
    """Pods with the operator's own recent writes applied, for when the watch has not delivered them yet.

    `deleting`: names of pods the operator deleted; `counted`: failure markers it wrote (name -> value).
    """
    deleting, counted = set(deleting), counted or {}
    out = []
    for pod in pods:
        if pod.name in counted and pod.counted is None and pod.phase == PHASE_FAILED:
            pod = replace(pod, counted=counted[pod.name])
        if pod.name in deleting:
            pod = replace(pod, terminating=True)
        out.append(pod)
    return out
