"""What the status's conditions say at each transition, and the Events they post (reconcile/conditions.py)."""

from __future__ import annotations

import copy

from agents_operator import reconcile
from tests.world import NOW, World, make_job


def test_running_when_every_ps_and_worker_runs():
    world = World(make_job(evaluator=True))
    world.settle()
    for name in (world.pod("ps", 0), world.pod("worker", 0)):
        world.set_phase(name, "Running")
    world.step()
    assert world.status["state"] == "Created"
    world.set_phase(world.pod("worker", 1), "Running")  # the evaluator may still be pending
    world.step()
    assert world.status["state"] == "Running"
    assert world.status["replicaStatuses"] == {
        "ps": {"active": 1, "succeeded": 0, "failed": 0},
        "worker": {"active": 2, "succeeded": 0, "failed": 0},
        "evaluator": {"active": 1, "succeeded": 0, "failed": 0},
    }
    assert [e.reason for e in world.events] == ["JobCreated", "JobRunning"]


# --- children the API server refuses -----------------------------------------------------------------------


def _refusal(pod: str) -> reconcile.Refusal:
    return reconcile.Refusal("Pod", pod, 403, f'pods "{pod}" is forbidden: exceeded quota: q, limited: pods=0')


def test_refused_children_are_a_condition_with_the_api_message_and_an_event_each():
    world = World(make_job())
    world.apply(world.plan())
    refusals = [_refusal("pj-worker-0"), _refusal("pj-worker-1")]
    report = reconcile.refused(world.status, refusals, NOW)
    world.apply(report)
    cond = world.condition("ReplicaFailure")
    assert cond["status"] == "True" and cond["reason"] == "FailedCreate"
    assert cond["message"] == refusals[0].message + " (and 1 more)"
    assert world.status["state"] == "ReplicaFailure"  # not a Created that will never progress
    assert [(e.type, e.reason) for e in report.events] == [("Warning", "FailedCreate")] * 2
    assert "pod pj-worker-1" in report.events[1].message and "exceeded quota" in report.events[1].message
    # The retry is refused the same way: nothing new to say.
    again = reconcile.refused(world.status, refusals, NOW)
    assert again.events == [] and again.status_patch == {}


def test_a_refusal_clears_once_every_child_exists():
    world = World(make_job())
    world.apply(world.plan())
    world.apply(reconcile.refused(world.status, [_refusal("pj-ps-0")], NOW))
    world.settle()  # the quota was lifted: the next plans create what was missing
    assert world.condition("ReplicaFailure")["status"] == "False"
    assert world.status["state"] == "Created"
    world.run_all()
    world.settle()
    assert world.status["state"] == "Running"


def test_a_job_that_ends_while_refused_keeps_no_refusal():
    world = World(make_job(deadline=60))
    world.apply(world.plan())
    world.apply(reconcile.refused(world.status, [_refusal("pj-ps-0")], NOW))
    world.step(minutes=2)
    assert world.status["state"] == "Failed" and world.condition("ReplicaFailure")["status"] == "False"


# --- pods that cannot start ------------------------------------------------------------------------------

UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes are available"}
    ],
}


def test_a_pod_that_cannot_start_is_said_in_a_condition_and_an_event_until_it_runs():
    world = World(make_job())
    world.settle()
    stuck = world.pod("worker", 1)
    world.pods[stuck]["status"] = copy.deepcopy(UNSCHEDULABLE)
    plan = world.step()
    assert world.status["state"] == "ReplicaFailure"
    condition = world.condition("ReplicaFailure")
    assert (condition["status"], condition["reason"]) == ("True", "Unschedulable")
    assert condition["message"] == f"pod {stuck} cannot start: 0/1 nodes are available"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Unschedulable")]
    assert world.step().events == []  # said once, not on every plan
    world.run_all()
    world.step()
    assert world.status["state"] == "Running"
    assert world.condition("ReplicaFailure")["status"] == "False"
