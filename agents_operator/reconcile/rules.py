"""The lifecycle rules of an AgentsJob: when it succeeded, when its deadline passed, what a failed pod leads
to. Pure module, and the only place these are decided: the operator and the local launcher both execute
the plan that `steps` makes with them.

An `Outcome` is how a job ends: the condition that turns True and its reason. The reasons are constants
here; docs/operator.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from agents_operator import api, jobstatus, naming, podview
from agents_operator.podview import PodView

INVALID_SPEC = "InvalidSpec"
PRIVILEGED_NOT_ALLOWED = "PrivilegedNotAllowed"
CHIEF_SUCCEEDED = "ChiefSucceeded"
ALL_WORKERS_SUCCEEDED = "AllWorkersSucceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
POD_FAILED = "PodFailed"
"""A pod failed under restartPolicy Never (the job fails); also the Event of a failure that is replaced."""
PERMANENT_EXIT_CODE = "PermanentExitCode"
SCALED = "Scaled"
"""The Event of a change of an elastic job's worker count."""
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"

PERMANENT_EXIT_CODES = range(1, 128)
"""Under restartPolicy ExitCode these fail the job; 128 and above (signals, OOM kill, eviction) are retried."""


@dataclass(frozen=True)
class Outcome:
    """How a job ends: the condition that turns True (Succeeded or Failed), a CamelCase reason, a sentence."""

    condition: str
    reason: str
    message: str
    pod: str | None = None
    """The pod whose failure ended the job, when one did."""

    @property
    def succeeded(self) -> bool:
        return self.condition == api.SUCCEEDED


def success(job: api.AgentsJob, slots: Mapping[tuple[str, int], PodView]) -> Outcome | None:
    """successPolicy ChiefWorker: worker 0 succeeded; AllWorkers: every worker did."""
    workers = [slots.get((naming.WORKER, i)) for i in range(job.spec.replica_specs.worker.replicas)]
    done = [w is not None and w.state == podview.POD_SUCCEEDED for w in workers]
    if job.spec.success_policy == "ChiefWorker" and done[0]:
        chief = naming.child_name(job.name, naming.WORKER, 0)
        return Outcome(api.SUCCEEDED, CHIEF_SUCCEEDED, f"{chief} succeeded")
    if job.spec.success_policy == "AllWorkers" and all(done):
        return Outcome(api.SUCCEEDED, ALL_WORKERS_SUCCEEDED, f"all {len(workers)} workers succeeded")
    return None


def deadline(run: api.RunPolicy, start_time: str | None, now: datetime) -> tuple[Outcome | None, float | None]:
    """activeDeadlineSeconds: the Outcome once it has passed since `start_time`, else the seconds left (None:
    no deadline runs: none is set, the job has not started, or it is suspended)."""
    started = jobstatus.parse_time(start_time)
    if not run.active_deadline_seconds or started is None or run.suspend:
        return None, None
    ends = started + timedelta(seconds=run.active_deadline_seconds)
    if now < ends:
        return None, (ends - now).total_seconds()
    message = f"ran longer than activeDeadlineSeconds ({run.active_deadline_seconds} s since {start_time})"
    return Outcome(api.FAILED, DEADLINE_EXCEEDED, message), None


def describe(pod: PodView) -> str:
    code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
    reason = f", {pod.reason or pod.waiting}" if pod.reason or pod.waiting else ""
    said = pod.waiting_message if pod.waiting else pod.message
    return f"pod {pod.name} failed ({code}{reason}{f': {said}' if said else ''})"


def failure(pod: PodView, restart_policy: str, restarts: int, backoff_limit: int) -> Outcome | None:
    """What a failure not counted yet leads to: the Outcome that fails the job, or None: the pod is replaced.

    Never fails the job; ExitCode fails it on a permanent exit code (1-127) and replaces it otherwise
    (signals, no exit code: eviction); OnFailure and Always replace it. Every replacement is counted:
    with `restarts` already at `backoff_limit`, the job fails instead.
    """
    if restart_policy == "Never":
        return Outcome(api.FAILED, POD_FAILED, f"{describe(pod)}; restartPolicy Never", pod.name)
    if restart_policy == "ExitCode" and pod.exit_code in PERMANENT_EXIT_CODES:
        message = f"{describe(pod)}; restartPolicy ExitCode treats 1-127 as permanent"
        return Outcome(api.FAILED, PERMANENT_EXIT_CODE, message, pod.name)
    if restarts >= backoff_limit:
        message = f"{describe(pod)}; {restarts} restart(s) used, backoffLimit {backoff_limit}"
        return Outcome(api.FAILED, BACKOFF_LIMIT_EXCEEDED, message, pod.name)
    return None


@dataclass(frozen=True)
class Failures:
    """The failed pods of one plan: what ends the job, or what is replaced and counted."""

    restarts: int
    """status.restarts after this plan's count."""
    replaced: list[PodView]
    """Failed pods to delete so that their slots are refilled, each with the count that includes its failure."""
    counted: list[PodView]
    """Those of `replaced` counted by this plan (the others were counted before)."""
    outcome: Outcome | None = None


def failures(job: api.AgentsJob, slots: Iterable[PodView | None], restarts: int) -> Failures:
    """Apply `failure` to every failed pod in slot order, counting each replacement.

    The first Outcome ends the job: nothing is replaced then (a permanent failure ends it before what failed
    with it is restarted), though failures judged before it in this plan stay counted in `restarts`, which
    the backoff limit's message quotes. A pod with a marker (`PodView.counted`) was counted before, perhaps
    by an operator that then stopped: it is replaced without being counted again.
    """
    replaced: list[PodView] = []
    counted: list[PodView] = []
    backoff_limit = job.spec.run_policy.backoff_limit
    for pod in slots:
        if pod is None or pod.state != podview.POD_FAILED:
            continue
        if pod.counted is not None:
            replaced.append(pod)
            continue
        outcome = failure(pod, job.spec.restart_policy(pod.replica_type), restarts, backoff_limit)
        if outcome is not None:
            return Failures(restarts, replaced, counted, outcome)
        restarts += 1
        counted.append(replace(pod, counted=restarts))
        replaced.append(counted[-1])
    return Failures(restarts, replaced, counted)
