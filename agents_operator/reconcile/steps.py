"""(job, observed children, now) -> the actions that move the job's children toward its spec, and its new status.

Pure module: `plan` reads plain dicts (or `status` views) and returns a `Plan`, which an executor carries
out: the operator's `kube` against the API server, or the local launcher (`local`) over processes. The
same inputs always give the same plan, so a restarted operator (or one that runs the same plan twice from
a stale cache) makes the same decisions again:

- children have deterministic names, so a create that already happened is a 409, not a duplicate;
- a failure is counted once: the count goes onto the failed pod (`podview.ANNOTATION_COUNTED`) before the
  status and before the pod is deleted, and `restarts` is never lower than the highest marker seen;
- a pod with a deletionTimestamp neither fails nor succeeds (someone, maybe us, is deleting it): its slot
  is refilled once it is gone, and only failures count as restarts;
- a finished job is never reopened: after Succeeded/Failed only cleanup and the TTL run.

Lifecycle, in the order `plan` decides it, one function each (the rules come from `rules`, the conditions
from `conditions`):
1. spec that fails `api.parse_job` -> Failed/InvalidSpec, spec.podSecurity Privileged on an operator that does
   not allow it -> Failed/PrivilegedNotAllowed (no children touched): `_refuse`;
2. finished -> cleanPodPolicy, then ttlSecondsAfterFinished deletes the job: `_finished`;
3. successPolicy met (ChiefWorker: worker 0 succeeded; AllWorkers: every worker) -> Succeeded;
4. activeDeadlineSeconds passed since startTime -> Failed/DeadlineExceeded, running pods deleted even under
   cleanPodPolicy None (a deadline that leaves pods running would not be one);
5. failed pods, per restartPolicy of their type: Never -> Failed/PodFailed; ExitCode with 1-127 ->
   Failed/PermanentExitCode; otherwise replaced if restarts < backoffLimit, else Failed/BackoffLimitExceeded
   (3-5: `_decide`, a job that ends there: `_end`);
6. suspend -> active pods deleted, Suspended; resume -> startTime reset (the deadline counts running time):
   `_suspend`, `_progress`;
7. missing Services, Pods and TensorBoard created: `_create_missing`, then the conditions of a job in
   progress: `_running`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from agents_operator import api, jobstatus, naming, podsecurity, podview, render
from agents_operator.api import AgentsJobStatus
from agents_operator.podview import POD_ACTIVE, ChildView, PodView
from agents_operator.reconcile import actions as act
from agents_operator.reconcile import rules
from agents_operator.reconcile.conditions import Conditions
from agents_operator.reconcile.observe import Desired, DesiredCache, Observed, Slot, observe, replica_statuses

RUNNING_TYPES = (naming.PS, naming.WORKER, naming.ENV_SERVER)
"""The pods a job needs running to train (the evaluator is optional to progress)."""

PRIVILEGED_NOT_ALLOWED = (
    f"spec.podSecurity: {podsecurity.PRIVILEGED} is not allowed by this operator (it runs without "
    "--allow-privileged-jobs, chart value podSecurity.allowPrivilegedJobs); no pods were created"
)


class _Builder:
    """Collects actions, the new status and its Events while the plan is decided."""

    def __init__(self, job_status: AgentsJobStatus, now: datetime):
        self.status = job_status
        self.now = now
        self.conditions = Conditions(job_status, now)
        self.marks: list[act.MarkCounted] = []
        self.deletes: list[act.Delete] = []
        self.deleting: set[tuple[str, str]] = set()
        self.creates: list[act.Create] = []
        self.job_delete: act.DeleteJob | None = None
        self.requeue_after: float | None = None

    def delete(self, kind: str, name: str, reason: str, grace: int | None = None) -> None:
        if (kind, name) not in self.deleting:
            self.deleting.add((kind, name))
            self.deletes.append(act.Delete(kind, name, reason, grace))

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def finish(self, old: Mapping[str, Any], outcome: rules.Outcome | None = None) -> act.Plan:
        self.status.state = jobstatus.state_of(self.status)
        new = jobstatus.dump_status(self.status)
        patch = jobstatus.status_patch(old, new)
        actions: list[act.Action] = [*self.marks]
        if patch:
            actions.append(act.WriteStatus(patch))
        actions += [*self.deletes, *self.creates]
        if self.job_delete:
            actions.append(self.job_delete)
        events = self.conditions.events
        return act.Plan(actions=actions, status=new, events=events, requeue_after=self.requeue_after, outcome=outcome)


@dataclass
class _Job:
    """One job as a plan sees it: the parsed spec, the status it had, what it asks for and what is there."""

    name: str
    spec: api.AgentsJob
    prev: AgentsJobStatus
    old: dict
    """The status as stored, which the new one is compared with."""
    desired: Desired
    options: render.RenderOptions
    seen: Observed

    @property
    def slots(self) -> dict[Slot, PodView]:
        return self.seen.slots

    @property
    def run(self) -> api.RunPolicy:
        return self.spec.spec.run_policy


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
) -> act.Plan:
    """Decide what to do about one AgentsJob, given its observed pods, Services and Deployments.

    `cache` (this job's, from an earlier plan) spares rendering what the spec asks for again.
    `allow_privileged`: the operator's opt-out (--allow-privileged-jobs); without it a job with
    spec.podSecurity Privileged fails before any child is created.
    """
    options = options or render.RenderOptions()
    meta = job.get("metadata") or {}
    old = dict(job.get("status") or {})
    prev = jobstatus.parse_status(old)
    b = _Builder(prev.model_copy(deep=True), now)
    try:
        spec = api.parse_job({k: job[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in job})
    except api.InvalidJob as err:
        return _refuse(b, prev, old, meta, rules.INVALID_SPEC, f"the spec cannot run: {err}")
    if spec.spec.pod_security == podsecurity.PRIVILEGED and not allow_privileged:
        return _refuse(b, prev, old, meta, rules.PRIVILEGED_NOT_ALLOWED, PRIVILEGED_NOT_ALLOWED)
    if meta.get("deletionTimestamp"):
        return act.Plan(actions=[], status=old)  # being deleted: creating children now would fight the GC

    desired = cache.get(job, spec, options) if cache is not None else Desired.of(spec, options)
    name = meta.get("name") or ""
    seen = observe(name, meta.get("uid"), desired, pods, services, deployments)
    for stray in seen.strays:
        b.delete(stray.kind, stray.name, stray.reason)
    b.status.observed_generation = meta.get("generation")
    b.status.tensorboard_url = render.tensorboard_url(spec)
    b.status.worker_selector = naming.type_selector(name, naming.WORKER)
    j = _Job(name, spec, prev, old, desired, options, seen)
    return _finished(b, j) if jobstatus.finished(prev) else _decide(b, j)


def _refuse(b: _Builder, prev: AgentsJobStatus, old: dict, meta: Mapping, reason: str, message: str) -> act.Plan:
    """1. A job that cannot run fails at once, and nothing of it is created."""
    b.status.observed_generation = meta.get("generation")  # judged: its spec changes are what wake the operator
    if not jobstatus.finished(prev):
        b.conditions.refuse(reason, message)
        b.status.completion_time = jobstatus.timestamp(b.now)
    return b.finish(old)


def _finished(b: _Builder, j: _Job) -> act.Plan:
    """2. A finished job only cleans up and waits for its TTL."""
    failed = jobstatus.get_condition(j.prev, api.FAILED)
    deadline = failed is not None and failed.status == "True" and failed.reason == rules.DEADLINE_EXCEEDED
    why = "succeeded" if jobstatus.is_true(j.prev, api.SUCCEEDED) else "failed"
    _cleanup(b, j, stop_running=deadline, why=why)
    b.status.replica_statuses = replica_statuses(j.spec, j.slots, j.prev)
    _ttl(b, j.run.ttl_seconds_after_finished)
    return b.finish(j.old)


def _decide(b: _Builder, j: _Job) -> act.Plan:
    """3-5. Success, deadline, failures: whichever ends the job first; else failed pods are replaced."""
    restarts = max([j.prev.restarts, *(p.counted for p in j.slots.values() if p.counted is not None)])
    outcome = rules.success(j.spec, j.slots)
    if outcome is None:
        # A resumed job's clock restarts (as for a batch Job): the time spent suspended does not count.
        start = None if jobstatus.is_true(j.prev, api.SUSPENDED) else b.status.start_time
        outcome, remaining = rules.deadline(j.run, start, b.now)
        if remaining is not None:
            b.requeue(remaining)
    failures = rules.Failures(restarts, [], [])
    if outcome is None:
        failures = rules.failures(j.spec, (j.slots.get(s) for s in j.desired.slots), restarts)
        outcome = failures.outcome
    limit = j.run.backoff_limit
    for pod in failures.counted:
        what = f"{rules.describe(pod)}; replacing it (restart {pod.counted} of backoffLimit {limit})"
        b.conditions.events.append(act.Event(act.WARNING, rules.POD_FAILED, what))
    b.status.restarts = failures.restarts
    if outcome is not None:
        return _end(b, j, outcome)
    b.marks += [act.MarkCounted(pod.name, pod.counted) for pod in failures.counted]
    return _progress(b, j, failures)


def _end(b: _Builder, j: _Job, outcome: rules.Outcome) -> act.Plan:
    """The job succeeded or failed: its conditions say so, cleanup runs, the TTL starts."""
    b.conditions.end(outcome)
    b.status.completion_time = jobstatus.timestamp(b.now)
    if outcome.succeeded:
        b.status.export = render.export_status(j.spec)
    deadline = outcome.reason == rules.DEADLINE_EXCEEDED
    _cleanup(b, j, stop_running=deadline, why=outcome.condition.lower())
    b.status.replica_statuses = replica_statuses(j.spec, j.slots)
    _ttl(b, j.run.ttl_seconds_after_finished)
    return b.finish(j.old, outcome)


def _progress(b: _Builder, j: _Job, failures: rules.Failures) -> act.Plan:
    """A job in progress: failed pods go, then 6. suspend or resume, 7. what is missing is created."""
    b.conditions.created(j.name)
    for pod in failures.replaced:
        b.delete(act.KIND_POD, pod.name, f"replacing the failed pod (restart {pod.counted})", grace=0)
        j.slots[pod.slot] = replace(pod, terminating=True)
    if j.run.suspend:
        return _suspend(b, j)
    if jobstatus.is_true(j.prev, api.SUSPENDED):
        b.conditions.resumed()
        b.status.start_time = None  # the deadline counts from the resume, as for a batch Job
    _scale(b, j)
    created = _create_missing(b, j)
    if stuck := [p for p in j.slots.values() if p.waiting and p.state == POD_ACTIVE]:
        b.conditions.cannot_start(stuck)
    elif not b.creates:
        b.conditions.children_created()
    if b.status.start_time is None and (created or any(not p.terminating for p in j.slots.values())):
        b.status.start_time = jobstatus.timestamp(b.now)
        if j.run.active_deadline_seconds:
            b.requeue(j.run.active_deadline_seconds)
    _running(b, j, restarting=bool(failures.counted), created=created)
    return b.finish(j.old)


def _suspend(b: _Builder, j: _Job) -> act.Plan:
    """6. A suspended job's active pods are deleted; finished ones, the Services and the status stay."""
    for pod in j.slots.values():
        if pod.state == POD_ACTIVE:
            b.delete(act.KIND_POD, pod.name, "job suspended")
    b.conditions.suspended()
    b.status.replica_statuses = replica_statuses(j.spec, {s: p for s, p in j.slots.items() if not p.terminating})
    return b.finish(j.old)


def _scale(b: _Builder, j: _Job) -> None:
    """An elastic job whose worker count changed since its children were made says so (the pods follow in
    `_create_missing` and as strays: the highest indices go)."""
    workers, before = j.spec.spec.replica_specs.worker.replicas, j.prev.workers
    if before is not None and before != workers:
        why = "added" if workers > before else "removed, the highest indices first"
        b.conditions.events.append(act.Event(act.NORMAL, rules.SCALED, f"workers {before} -> {workers}: {why}"))
    b.status.workers = workers


def _create_missing(b: _Builder, j: _Job) -> list[Slot]:
    """7. Create what is missing: Services first (pods resolve each other through them), then the pods of
    empty slots; delete children the spec no longer has. The slots whose pods are created."""
    for key, obj in j.desired.others.items():
        if key not in j.seen.children:
            b.creates.append(act.Create(copy.deepcopy(obj)))
    for (kind, name), child in j.seen.children.items():
        if (kind, name) not in j.desired.others and not child.terminating:
            b.delete(kind, name, "not a child of the spec")
    missing = [slot for slot in j.desired.slots if slot not in j.slots]
    b.creates += [act.Create(render.pod(j.spec, replica_type, index, j.options)) for replica_type, index in missing]
    return missing


def _running(b: _Builder, j: _Job, *, restarting: bool, created: list[Slot]) -> None:
    """The conditions and replica counts of a job in progress: Running once every ps, worker (and env
    server) runs or has finished; Restarting from a replaced failure until then."""
    members = [j.slots.get(s) for s in j.desired.slots if s[0] in RUNNING_TYPES]
    running = all(
        p is not None and not p.terminating and p.phase in (podview.PHASE_RUNNING, podview.PHASE_SUCCEEDED)
        for p in members
    )
    remote = any(s[0] == naming.ENV_SERVER for s in j.desired.slots)
    what = "ps, worker and env server" if remote else "ps and worker"
    b.conditions.in_progress(running, restarting or jobstatus.is_true(j.prev, api.RESTARTING), what)
    # Pods created by this plan count as active (Pending) now, so that their creation needs no second status
    # write when their watch events come in.
    live = {s: p for s, p in j.slots.items() if not p.terminating}
    pending = {slot: PodView(naming.child_name(j.name, *slot), *slot, phase=podview.PHASE_PENDING) for slot in created}
    b.status.replica_statuses = replica_statuses(j.spec, {**live, **pending})


def _cleanup(b: _Builder, j: _Job, *, stop_running: bool, why: str) -> None:
    """cleanPodPolicy after the job finished. `stop_running` deletes active pods even under None.

    Running env servers are always deleted: they serve only this job's workers and never exit by themselves.
    """
    policy = j.run.clean_pod_policy
    for pod in j.slots.values():
        if pod.terminating:
            continue
        stop = policy == "Running" or stop_running or pod.replica_type == naming.ENV_SERVER
        if policy == "All" or (pod.state == POD_ACTIVE and stop):
            b.delete(act.KIND_POD, pod.name, f"job {why}, cleanPodPolicy {policy}")
    if policy == "None":
        return
    for svc in j.seen.children.values():
        if svc.kind == act.KIND_SERVICE and not svc.terminating and not svc.name.endswith(naming.TENSORBOARD_SUFFIX):
            b.delete(act.KIND_SERVICE, svc.name, f"job {why}, cleanPodPolicy {policy}")


def _ttl(b: _Builder, ttl: int | None) -> None:
    if ttl is None:
        return
    ended = jobstatus.parse_time(b.status.completion_time) or b.now
    remaining = (ended + timedelta(seconds=ttl) - b.now).total_seconds()
    if remaining <= 0:
        b.job_delete = act.DeleteJob(f"finished {ttl} s ago (ttlSecondsAfterFinished)")
    else:
        b.requeue(remaining)


def refused(job_status: Mapping[str, Any], refusals: list[act.Refusal], now: datetime) -> act.Plan:
    """What to do when the API server refused to create children: condition ReplicaFailure (reason
    FailedCreate) with its message, and a Warning act.Event naming each child, posted when the condition turns
    True or its message changes (not on every retry). The next plan that finds every child in place sets
    the condition False."""
    old = dict(job_status)
    b = _Builder(jobstatus.parse_status(old), now)
    b.conditions.refused(refusals)
    return b.finish(old)
