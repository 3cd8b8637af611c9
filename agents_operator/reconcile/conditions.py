"""What a job's conditions say at each turn of its lifecycle. Pure module.

`steps` decides what happens; `Conditions` writes it into the status being planned, one method per
transition, and collects the Events people see: every condition that turns True is one (a Warning for
Failed and Restarting), and so is Suspended turning either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agents_operator import jobstatus
from agents_operator.api import (
    CREATED,
    FAILED,
    REPLICA_FAILURE,
    RESTARTING,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    AgentsJobStatus,
)
from agents_operator.podview import PodView
from agents_operator.reconcile.actions import NORMAL, WARNING, Event, Refusal
from agents_operator.reconcile.rules import Outcome

JOB_CREATED = "JobCreated"
JOB_RUNNING = "JobRunning"
PODS_PENDING = "PodsPending"
POD_RESTARTING = "Restarting"
JOB_SUSPENDED = "JobSuspended"
JOB_RESUMED = "JobResumed"
CHILDREN_CREATED = "ChildrenCreated"
FAILED_CREATE = "FailedCreate"

WARNING_TRANSITIONS = {FAILED, RESTARTING}
SPEC_CANNOT_RUN = "the spec cannot run"


class Conditions:
    """The conditions of the status one plan writes, and the Events of their transitions (in order)."""

    def __init__(self, job_status: AgentsJobStatus, now: datetime):
        self.status = job_status
        self.now = now
        self.events: list[Event] = []

    def set(self, type_: str, value: bool, reason: str, message: str) -> None:
        if jobstatus.set_condition(self.status, type_, value, reason, message, self.now) and (
            value or type_ == SUSPENDED
        ):
            kind = WARNING if value and type_ in WARNING_TRANSITIONS else NORMAL
            self.events.append(Event(kind, reason, message))

    def refuse(self, reason: str, message: str) -> None:
        """A spec that cannot run fails the job before anything of it exists."""
        self.set(RUNNING, False, reason, SPEC_CANNOT_RUN)
        self.set(FAILED, True, reason, message)

    def end(self, outcome: Outcome) -> None:
        """The job succeeded or failed: nothing runs, restarts or waits for a child any more."""
        for ended in (RUNNING, RESTARTING, REPLICA_FAILURE):
            self.set(ended, False, outcome.reason, outcome.message)
        self.set(outcome.condition, True, outcome.reason, outcome.message)

    def created(self, job: str) -> None:
        self.set(CREATED, True, JOB_CREATED, f"AgentsJob {job} is reconciled into its pods")

    def suspended(self) -> None:
        self.set(RUNNING, False, JOB_SUSPENDED, "the job is suspended")
        self.set(RESTARTING, False, JOB_SUSPENDED, "the job is suspended")
        self.set(SUSPENDED, True, JOB_SUSPENDED, "the job is suspended: its pods are deleted")

    def resumed(self) -> None:
        self.set(SUSPENDED, False, JOB_RESUMED, "the job is resumed: its pods are recreated")

    def children_created(self) -> None:
        self.set(REPLICA_FAILURE, False, CHILDREN_CREATED, "every child of the job exists")

    def cannot_start(self, pods: list[PodView]) -> None:
        """ReplicaFailure with the kubelet's (or the scheduler's) reason and message for pods that cannot start;
        a Warning Event per pod when the condition turns True or its message changes."""
        first = pods[0]
        more = f" (and {len(pods) - 1} more)" if len(pods) > 1 else ""
        message = f"pod {first.name} cannot start: {first.waiting_message}{more}"
        before = jobstatus.get_condition(self.status, REPLICA_FAILURE)
        if before is None or before.status != "True" or before.message != message:
            self.events += [
                Event(WARNING, p.waiting or "", f"pod {p.name} cannot start: {p.waiting_message}") for p in pods
            ]
        jobstatus.set_condition(self.status, REPLICA_FAILURE, True, first.waiting or "", message, self.now)

    def in_progress(self, running: bool, restarting: bool, what: str) -> None:
        """`running`: every pod of `what` runs or has finished; `restarting`: failed pods are being replaced."""
        if running:
            self.set(RESTARTING, False, JOB_RUNNING, f"every {what} is running")
            self.set(RUNNING, True, JOB_RUNNING, f"every {what} is running")
        elif restarting:
            self.set(RUNNING, False, POD_RESTARTING, "failed pods are being replaced")
            self.set(RESTARTING, True, POD_RESTARTING, "failed pods are being replaced")
        else:
            self.set(RUNNING, False, PODS_PENDING, f"waiting for every {what} to run")

    def refused(self, refusals: list[Refusal]) -> None:
        """ReplicaFailure with the API server's message; a Warning Event per child when the message is new."""
        before = jobstatus.get_condition(self.status, REPLICA_FAILURE)
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        message = f"{refusals[0].message}{more}"
        if before is None or before.status != "True" or before.message != message:
            self.events += [
                Event(WARNING, FAILED_CREATE, f"Error creating {r.kind.lower()} {r.name}: {r.message}")
                for r in refusals
            ]
        jobstatus.set_condition(self.status, REPLICA_FAILURE, True, FAILED_CREATE, message, self.now)


def ended(job_status: Mapping[str, Any]) -> Outcome | None:
    """How a status says its job ended: the condition its state names when that is Failed, Succeeded or
    Suspended (nothing runs); None while the job runs or waits to."""
    parsed = jobstatus.parse_status(job_status)
    state = jobstatus.state_of(parsed)
    condition = jobstatus.get_condition(parsed, state) if state in (FAILED, SUCCEEDED, SUSPENDED) else None
    if condition is None:
        return None
    return Outcome(condition.type, condition.reason or "", condition.message or "")
