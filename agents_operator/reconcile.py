"""(job, observed children, now) -> the actions that move the cluster toward the job, and the job's new status.

Pure module: `plan` reads plain dicts (or `status` views) and returns a `Plan`; `kube` executes it and
`handlers` wires it to kopf. The same inputs always give the same plan, so a restarted operator (or one
that runs the same plan twice from a stale cache) makes the same decisions again:

- children have deterministic names, so a create that already happened is a 409, not a duplicate;
- a failure is counted once: the count goes onto the failed pod (`status.ANNOTATION_COUNTED`) before the
  status and before the pod is deleted, and `restarts` is never lower than the highest marker seen;
- a pod with a deletionTimestamp neither fails nor succeeds (someone, maybe us, is deleting it): its slot
  is refilled once it is gone, and only failures count as restarts;
- a finished job is never reopened: after Succeeded/Failed only cleanup and the TTL run.

Lifecycle, in the order `plan` decides it:
1. spec that fails `api.parse_job` -> Failed/InvalidSpec, spec.podSecurity Privileged on an operator that does
   not allow it -> Failed/PrivilegedNotAllowed (no children touched);
2. finished -> cleanPodPolicy, then ttlSecondsAfterFinished deletes the job;
3. successPolicy met (ChiefWorker: worker 0 succeeded; AllWorkers: every worker) -> Succeeded;
4. activeDeadlineSeconds passed since startTime -> Failed/DeadlineExceeded, running pods deleted even under
   cleanPodPolicy None (a deadline that leaves pods running would not be one);
5. failed pods, per restartPolicy of their type: Never -> Failed/PodFailed; ExitCode with 1-127 ->
   Failed/PermanentExitCode; otherwise replaced if restarts < backoffLimit, else Failed/BackoffLimitExceeded;
6. suspend -> active pods deleted, Suspended; resume -> startTime reset (the deadline counts running time);
7. missing Services, Pods and TensorBoard created.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from agents_operator import api, naming, podsecurity, render, status
from agents_operator.api import AgentsJobStatus, ReplicaStatus
from agents_operator.status import ACTIVE, FAILED, SUCCEEDED, ChildView, PodView

# --- actions ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    """Create a child (409 means it exists already: success)."""

    obj: dict

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


@dataclass(frozen=True)
class Delete:
    """Delete a child (404 means it is gone already: success)."""

    kind: str
    name: str
    reason: str
    grace_seconds: int | None = None
    """0 for pods that have already ended (frees the name at once); None: the default grace period."""


@dataclass(frozen=True)
class MarkCounted:
    """Annotate a failed pod with the restart count that includes its failure (before status is written)."""

    pod: str
    restarts: int


@dataclass(frozen=True)
class WriteStatus:
    """Merge-patch the status subresource with these top-level keys (None removes one)."""

    patch: dict


@dataclass(frozen=True)
class DeleteJob:
    reason: str


Action = Create | Delete | MarkCounted | WriteStatus | DeleteJob


@dataclass(frozen=True)
class Refusal:
    """A child the API server refused to create (admission such as a quota or a policy, or validation)."""

    kind: str
    name: str
    code: int
    """The HTTP status: 403, 422 or 400."""
    message: str
    """The API server's own words (they name the child and the rule)."""


@dataclass(frozen=True)
class Event:
    type: str
    """Normal or Warning."""
    reason: str
    message: str


@dataclass
class Plan:
    """What to do, in order: markers, status, deletes, creates, job deletion; then post `events`."""

    actions: list[Action]
    status: dict
    """The whole new status (camelCase, as stored)."""
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    """Plan again after this many seconds even if nothing changes (deadline, TTL)."""

    @property
    def status_patch(self) -> dict:
        return next((a.patch for a in self.actions if isinstance(a, WriteStatus)), {})

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]


# --- helpers ---------------------------------------------------------------------------------------------

KIND_POD, KIND_SERVICE, KIND_DEPLOYMENT = "Pod", "Service", "Deployment"
WARNING_TRANSITIONS = {api.FAILED, api.RESTARTING}
RUNNING_TYPES = (naming.PS, naming.WORKER, naming.ENV_SERVER)
"""The pods a job needs running to train (the evaluator is optional to progress)."""


def _as_pod(pod: Mapping | PodView, job: str) -> PodView | None:
    return pod if isinstance(pod, PodView) else status.view_pod(pod, job)


def _as_child(obj: Mapping | ChildView, job: str, kind: str) -> ChildView | None:
    if isinstance(obj, ChildView):
        return obj
    view = status.view_child(obj, job)
    return replace(view, kind=view.kind or kind) if view else None


class _Builder:
    """Collects actions and events while the plan is decided."""

    def __init__(self, job_status: AgentsJobStatus, now: datetime):
        self.status = job_status
        self.now = now
        self.marks: list[MarkCounted] = []
        self.deletes: list[Delete] = []
        self.deleting: set[tuple[str, str]] = set()
        self.creates: list[Create] = []
        self.job_delete: DeleteJob | None = None
        self.events: list[Event] = []
        self.requeue_after: float | None = None

    def condition(self, type_: str, value: bool, reason: str, message: str) -> None:
        if status.set_condition(self.status, type_, value, reason, message, self.now) and (
            value or type_ == api.SUSPENDED
        ):
            kind = "Warning" if value and type_ in WARNING_TRANSITIONS else "Normal"
            self.events.append(Event(kind, reason, message))

    def delete(self, kind: str, name: str, reason: str, grace: int | None = None) -> None:
        if (kind, name) not in self.deleting:
            self.deleting.add((kind, name))
            self.deletes.append(Delete(kind, name, reason, grace))

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def finish(self, old: Mapping[str, Any]) -> Plan:
        self.status.state = status.state_of(self.status)
        new = status.dump_status(self.status)
        patch = status.status_patch(old, new)
        actions: list[Action] = [*self.marks]
        if patch:
            actions.append(WriteStatus(patch))
        actions += [*self.deletes, *self.creates]
        if self.job_delete:
            actions.append(self.job_delete)
        return Plan(actions=actions, status=new, events=self.events, requeue_after=self.requeue_after)


def _describe(pod: PodView) -> str:
    code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
    reason = f", {pod.reason}" if pod.reason else ""
    return f"pod {pod.name} failed ({code}{reason})"


def _replica_statuses(
    job: api.AgentsJob, pods: Mapping[tuple[str, int], PodView], prev: AgentsJobStatus | None = None
) -> dict[str, ReplicaStatus]:
    out = {}
    types = [t for t, _ in job.spec.replica_specs.items()]
    if job.topology.remote_servers:
        types.append(naming.ENV_SERVER)
    for replica_type in types:
        views = [p for p in pods.values() if p.replica_type == replica_type]
        counts = {s: sum(1 for p in views if p.state == s) for s in (ACTIVE, SUCCEEDED, FAILED)}
        if prev is not None:  # a finished job keeps what it saw, though cleanup removes pods
            before = prev.replica_statuses.get(replica_type) or ReplicaStatus()
            counts[SUCCEEDED] = max(counts[SUCCEEDED], before.succeeded)
            counts[FAILED] = max(counts[FAILED], before.failed)
        out[replica_type] = ReplicaStatus(active=counts[ACTIVE], succeeded=counts[SUCCEEDED], failed=counts[FAILED])
    return out


def _cleanup(
    b: _Builder,
    policy: str,
    pods: Mapping[tuple[str, int], PodView],
    services: Iterable[ChildView],
    *,
    stop_running: bool,
    why: str,
) -> None:
    """cleanPodPolicy after the job finished. `stop_running` deletes active pods even under None.

    Running env servers are always deleted: they serve only this job's workers and never exit by themselves.
    """
    for pod in pods.values():
        if pod.terminating:
            continue
        stop = policy == "Running" or stop_running or pod.replica_type == naming.ENV_SERVER
        if policy == "All" or (pod.state == ACTIVE and stop):
            b.delete(KIND_POD, pod.name, f"job {why}, cleanPodPolicy {policy}")
    if policy != "None":
        for svc in services:
            if svc.kind == KIND_SERVICE and not svc.terminating and not svc.name.endswith(naming.TENSORBOARD_SUFFIX):
                b.delete(KIND_SERVICE, svc.name, f"job {why}, cleanPodPolicy {policy}")


# --- what the spec asks for --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Desired:
    """What a job's spec asks for, short of the pods themselves: its slots and its other children.

    Pods are rendered in `plan` only for the slots that are empty (see `render.non_pod_children`).
    """

    slots: tuple[tuple[str, int], ...]
    """(type, index) of every pod, in the order `topology.Topology.slots` gives (creates follow it)."""
    others: dict[tuple[str, str], dict]
    """Every other child by (kind, name), in render order. Shared between plans: copied into a Create."""

    @classmethod
    def of(cls, job: api.AgentsJob, options: render.RenderOptions) -> Desired:
        others = {(c["kind"], c["metadata"]["name"]): c for c in render.non_pod_children(job, options)}
        return cls(tuple(job.topology.slots()), others)


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


# --- the plan --------------------------------------------------------------------------------------------


def plan(
    job: Mapping[str, Any],
    pods: Iterable[Mapping | PodView],
    services: Iterable[Mapping | ChildView] = (),
    deployments: Iterable[Mapping | ChildView] = (),
    *,
    now: datetime,
    options: render.RenderOptions | None = None,
    cache: DesiredCache | None = None,
    allow_privileged: bool = False,
) -> Plan:
    """Decide what to do about one AgentsJob, given its observed pods, Services and Deployments.

    `cache` (this job's, from an earlier plan) spares rendering what the spec asks for again.
    `allow_privileged`: the operator's opt-out (--allow-privileged-jobs); without it a job with
    spec.podSecurity Privileged fails before any child is created.
    """
    options = options or render.RenderOptions()
    meta = job.get("metadata") or {}
    name = meta.get("name") or ""
    old = dict(job.get("status") or {})
    prev = status.parse_status(old)
    b = _Builder(prev.model_copy(deep=True), now)
    st = b.status

    try:
        spec_job = api.parse_job({k: job[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in job})
    except api.InvalidJob as err:
        return _refuse(b, prev, old, meta, "InvalidSpec", f"the spec cannot run: {err}")
    if spec_job.spec.pod_security == podsecurity.PRIVILEGED and not allow_privileged:
        return _refuse(b, prev, old, meta, "PrivilegedNotAllowed", PRIVILEGED_NOT_ALLOWED)

    if meta.get("deletionTimestamp"):
        return Plan(actions=[], status=old)  # being deleted: creating children now would fight the GC

    uid = meta.get("uid")
    run = spec_job.spec.run_policy
    desired = cache.get(job, spec_job, options) if cache is not None else Desired.of(spec_job, options)
    expected, expected_set = desired.slots, set(desired.slots)

    # Observed pods by slot; strays and leftovers of an earlier job with the same name are deleted.
    slots: dict[tuple[str, int], PodView] = {}
    for raw in pods:
        pod = _as_pod(raw, name)
        if pod is None:
            continue
        foreign = bool(uid and pod.owner_uid and pod.owner_uid != uid)
        if foreign or pod.slot not in expected_set:
            if not pod.terminating:
                why = "owned by an earlier job of the same name" if foreign else "not a replica of the spec"
                b.delete(KIND_POD, pod.name, why)
            if pod.slot in expected_set:
                slots[pod.slot] = replace(pod, terminating=True)  # blocks the name until it is gone
            continue
        slots[pod.slot] = pod

    children: dict[tuple[str, str], ChildView] = {}
    for raw, kind in [*((s, KIND_SERVICE) for s in services), *((d, KIND_DEPLOYMENT) for d in deployments)]:
        child = _as_child(raw, name, kind)
        if child is None:
            continue
        if uid and child.owner_uid and child.owner_uid != uid and not child.terminating:
            b.delete(child.kind, child.name, "owned by an earlier job of the same name")
            child = replace(child, terminating=True)
        children[child.kind, child.name] = child

    st.observed_generation = meta.get("generation")
    st.tensorboard_url = render.tensorboard_url(spec_job)

    # 2. A finished job only cleans up and waits for its TTL.
    if status.finished(prev):
        why = "succeeded" if status.is_true(prev, api.SUCCEEDED) else "failed"
        failed = status.get_condition(prev, api.FAILED)
        deadline = failed is not None and failed.status == "True" and failed.reason == "DeadlineExceeded"
        _cleanup(b, run.clean_pod_policy, slots, children.values(), stop_running=deadline, why=why)
        st.replica_statuses = _replica_statuses(spec_job, slots, prev)
        _ttl(b, run.ttl_seconds_after_finished, st, now)
        return b.finish(old)

    restarts = max([prev.restarts, *(p.counted for p in slots.values() if p.counted is not None)])
    outcome: tuple[str, str, str] | None = None

    # 3. Success.
    workers = [slots.get((naming.WORKER, i)) for i in range(spec_job.spec.replica_specs.worker.replicas)]
    done = [w is not None and w.state == SUCCEEDED for w in workers]
    if spec_job.spec.success_policy == "ChiefWorker" and done[0]:
        outcome = (api.SUCCEEDED, "ChiefSucceeded", f"{naming.child_name(name, naming.WORKER, 0)} succeeded")
    elif spec_job.spec.success_policy == "AllWorkers" and all(done):
        outcome = (api.SUCCEEDED, "AllWorkersSucceeded", f"all {len(workers)} workers succeeded")

    # 4. Deadline.
    # A resumed job's clock restarts (as for a batch Job): the time spent suspended does not count.
    started = None if status.is_true(prev, api.SUSPENDED) else status.parse_time(st.start_time)
    if outcome is None and run.active_deadline_seconds and started and not run.suspend:
        ends = started + timedelta(seconds=run.active_deadline_seconds)
        if now >= ends:
            outcome = (
                api.FAILED,
                "DeadlineExceeded",
                f"ran longer than activeDeadlineSeconds ({run.active_deadline_seconds} s since {st.start_time})",
            )
        else:
            b.requeue((ends - now).total_seconds())

    # 5. Failures, per restart policy, counted against backoffLimit.
    replace_pods: list[PodView] = []
    new_restart = False
    if outcome is None:
        for slot in expected:
            pod = slots.get(slot)
            if pod is None or pod.state != FAILED:
                continue
            if pod.counted is not None:  # counted before (perhaps by an operator that then stopped)
                replace_pods.append(pod)
                continue
            policy = spec_job.spec.restart_policy(pod.replica_type)
            if policy == "Never":
                outcome = (api.FAILED, "PodFailed", f"{_describe(pod)}; restartPolicy Never")
            elif policy == "ExitCode" and pod.exit_code is not None and 1 <= pod.exit_code <= 127:
                outcome = (
                    api.FAILED,
                    "PermanentExitCode",
                    f"{_describe(pod)}; restartPolicy ExitCode treats 1-127 as permanent",
                )
            elif restarts >= run.backoff_limit:
                outcome = (
                    api.FAILED,
                    "BackoffLimitExceeded",
                    f"{_describe(pod)}; {restarts} restart(s) used, backoffLimit {run.backoff_limit}",
                )
            else:
                restarts += 1
                new_restart = True
                b.marks.append(MarkCounted(pod.name, restarts))
                replace_pods.append(replace(pod, counted=restarts))
                b.events.append(
                    Event(
                        "Warning",
                        "PodFailed",
                        f"{_describe(pod)}; replacing it (restart {restarts} of backoffLimit {run.backoff_limit})",
                    )
                )
            if outcome:
                break
    st.restarts = restarts

    if outcome is not None:
        state, reason, message = outcome
        b.marks.clear()  # the job ends: nothing will be replaced
        for ended in (api.RUNNING, api.RESTARTING, api.REPLICA_FAILURE):
            b.condition(ended, False, reason, message)
        b.condition(state, True, reason, message)
        st.completion_time = status.timestamp(now)
        if state == "Succeeded":
            st.export = render.export_status(spec_job)
        _cleanup(
            b,
            run.clean_pod_policy,
            slots,
            children.values(),
            stop_running=reason == "DeadlineExceeded",
            why=state.lower(),
        )
        st.replica_statuses = _replica_statuses(spec_job, slots)
        _ttl(b, run.ttl_seconds_after_finished, st, now)
        return b.finish(old)

    b.condition(api.CREATED, True, "JobCreated", f"AgentsJob {name} is reconciled into its pods")
    for pod in replace_pods:
        b.delete(KIND_POD, pod.name, f"replacing the failed pod (restart {pod.counted})", grace=0)
        slots[pod.slot] = replace(pod, terminating=True)

    # 6. Suspend and resume.
    if run.suspend:
        for pod in slots.values():
            if pod.state == ACTIVE:
                b.delete(KIND_POD, pod.name, "job suspended")
        b.condition(api.RUNNING, False, "JobSuspended", "the job is suspended")
        b.condition(api.RESTARTING, False, "JobSuspended", "the job is suspended")
        b.condition(api.SUSPENDED, True, "JobSuspended", "the job is suspended: its pods are deleted")
        st.replica_statuses = _replica_statuses(spec_job, {s: p for s, p in slots.items() if not p.terminating})
        return b.finish(old)
    if status.is_true(prev, api.SUSPENDED):
        b.condition(api.SUSPENDED, False, "JobResumed", "the job is resumed: its pods are recreated")
        st.start_time = None  # the deadline counts from the resume, as for a batch Job

    created = _create_missing(b, spec_job, options, desired, slots, children)
    if not b.creates:
        b.condition(api.REPLICA_FAILURE, False, "ChildrenCreated", "every child of the job exists")
    if st.start_time is None and (created or any(not p.terminating for p in slots.values())):
        st.start_time = status.timestamp(now)
        if run.active_deadline_seconds:
            b.requeue(run.active_deadline_seconds)

    # Conditions of a job in progress.
    members = [slots.get(s) for s in expected if s[0] in RUNNING_TYPES]
    running = all(p is not None and not p.terminating and p.phase in ("Running", "Succeeded") for p in members)
    what = "ps, worker and env server" if any(s[0] == naming.ENV_SERVER for s in expected) else "ps and worker"
    if running:
        b.condition(api.RESTARTING, False, "JobRunning", f"every {what} is running")
        b.condition(api.RUNNING, True, "JobRunning", f"every {what} is running")
    elif new_restart or status.is_true(prev, api.RESTARTING):
        b.condition(api.RUNNING, False, "Restarting", "failed pods are being replaced")
        b.condition(api.RESTARTING, True, "Restarting", "failed pods are being replaced")
    else:
        b.condition(api.RUNNING, False, "PodsPending", f"waiting for every {what} to run")
    # Pods created by this plan count as active (Pending) now, so that their creation needs no second status
    # write when their watch events come in.
    live = {s: p for s, p in slots.items() if not p.terminating}
    live.update({slot: PodView(naming.child_name(name, *slot), *slot, phase="Pending") for slot in created})
    st.replica_statuses = _replica_statuses(spec_job, live)
    return b.finish(old)


PRIVILEGED_NOT_ALLOWED = (
    f"spec.podSecurity: {podsecurity.PRIVILEGED} is not allowed by this operator (it runs without "
    "--allow-privileged-jobs, chart value podSecurity.allowPrivilegedJobs); no pods were created"
)


def _refuse(b: _Builder, prev: AgentsJobStatus, old: dict, meta: Mapping, reason: str, message: str) -> Plan:
    """1. A job that cannot run fails at once, and nothing of it is created."""
    b.status.observed_generation = meta.get("generation")  # judged: its spec changes are what wake the operator
    if not status.finished(prev):
        b.condition(api.RUNNING, False, reason, "the spec cannot run")
        b.condition(api.FAILED, True, reason, message)
        b.status.completion_time = status.timestamp(b.now)
    return b.finish(old)


def _create_missing(
    b: _Builder,
    job: api.AgentsJob,
    options: render.RenderOptions,
    desired: Desired,
    slots: Mapping[tuple[str, int], PodView],
    children: Mapping[tuple[str, str], ChildView],
) -> list[tuple[str, int]]:
    """7. Create what is missing: Services first (pods resolve each other through them), then the pods of
    empty slots; delete children the spec no longer has. The slots whose pods are created."""
    for key, obj in desired.others.items():
        if key not in children:
            b.creates.append(Create(copy.deepcopy(obj)))
    for (kind, name), child in children.items():
        if (kind, name) not in desired.others and not child.terminating:
            b.delete(kind, name, "not a child of the spec")
    missing = [slot for slot in desired.slots if slot not in slots]
    b.creates += [Create(render.pod(job, replica_type, index, options)) for replica_type, index in missing]
    return missing


def _ttl(b: _Builder, ttl: int | None, st: AgentsJobStatus, now: datetime) -> None:
    if ttl is None:
        return
    ended = status.parse_time(st.completion_time) or now
    remaining = (ended + timedelta(seconds=ttl) - now).total_seconds()
    if remaining <= 0:
        b.job_delete = DeleteJob(f"finished {ttl} s ago (ttlSecondsAfterFinished)")
    else:
        b.requeue(remaining)


def refused(job_status: Mapping[str, Any], refusals: list[Refusal], now: datetime) -> Plan:
    """What to do when the API server refused to create children: condition ReplicaFailure (reason
    FailedCreate) with its message, and a Warning Event naming each child, posted when the condition turns
    True or its message changes (not on every retry). The next plan that finds every child in place sets
    the condition False."""
    old = dict(job_status)
    b = _Builder(status.parse_status(old), now)
    before = status.get_condition(b.status, api.REPLICA_FAILURE)
    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
    message = f"{refusals[0].message}{more}"
    if before is None or before.status != "True" or before.message != message:
        b.events += [
            Event("Warning", "FailedCreate", f"Error creating {r.kind.lower()} {r.name}: {r.message}") for r in refusals
        ]
    status.set_condition(b.status, api.REPLICA_FAILURE, True, "FailedCreate", message, now)
    return b.finish(old)
