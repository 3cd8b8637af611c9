"""The lifecycle rules (reconcile/rules.py) as `reconcile.plan` applies them: restart policies, the backoff
limit across the job, success policies, the active deadline, and what a failure says."""

from __future__ import annotations

import copy

import pytest

from agents_operator import jobstatus
from agents_operator.reconcile import Create, Delete, MarkCounted
from tests.world import World, make_job


def kinds_names(actions, kind=Create):
    return {(a.kind, a.name) for a in actions if isinstance(a, kind)}


# --- restart policies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "exit_code", "reason", "outcome"),
    [
        ("OnFailure", 1, None, "restart"),
        ("OnFailure", 137, "OOMKilled", "restart"),
        ("Always", 2, None, "restart"),
        ("Never", 137, None, "PodFailed"),
        ("Never", 1, None, "PodFailed"),
        ("ExitCode", 1, None, "PermanentExitCode"),
        ("ExitCode", 127, None, "PermanentExitCode"),
        ("ExitCode", 128, None, "restart"),
        ("ExitCode", 137, "OOMKilled", "restart"),
        ("ExitCode", 143, None, "restart"),
        ("ExitCode", None, "Evicted", "restart"),
    ],
)
def test_failed_worker_per_restart_policy(policy, exit_code, reason, outcome):
    world = World(make_job(restart=policy))
    world.started()
    failed = world.pod("worker", 1)
    world.set_phase(failed, "Failed", exit_code=exit_code, reason=reason)
    plan = world.step()
    if outcome == "restart":
        assert plan.of(MarkCounted) == [MarkCounted(failed, 1)]
        assert Delete("Pod", failed, "replacing the failed pod (restart 1)", 0) in plan.of(Delete)
        assert world.status["state"] == "Restarting"
        assert world.status["restarts"] == 1
        assert any(e.reason == "PodFailed" and e.type == "Warning" for e in plan.events)
        world.settle()
        assert world.pods[failed]["status"]["phase"] == "Pending"  # replaced
        world.run_all()
        world.step()
        assert world.status["state"] == "Running"
        assert world.condition("Restarting")["status"] == "False"
    else:
        assert world.status["state"] == "Failed"
        assert world.condition("Failed")["reason"] == outcome
        assert world.status["restarts"] == 0
        assert world.status["completionTime"] == jobstatus.timestamp(world.now)
        # cleanPodPolicy Running: the ps and the running worker are deleted, the failed pod stays for its logs
        assert kinds_names(plan.actions, Delete) >= {("Pod", world.pod("ps", 0)), ("Pod", world.pod("worker", 0))}
        assert failed in world.pods


def test_ps_has_its_own_restart_policy():
    world = World(make_job(restart="ExitCode", ps_restart="Always"))
    world.started()
    world.set_phase(world.pod("ps", 0), "Failed", exit_code=1)
    world.step()
    assert world.status["state"] == "Restarting"


def test_ps_that_exits_zero_is_done_not_failed():
    world = World(make_job(restart="Never"))
    world.started()
    world.set_phase(world.pod("ps", 0), "Succeeded", exit_code=0)
    plan = world.step()
    assert plan.of(Delete) == [] and plan.of(Create) == []
    assert world.status["state"] == "Running"
    assert world.status["replicaStatuses"]["ps"] == {"active": 0, "succeeded": 1, "failed": 0}


@pytest.mark.parametrize(
    ("backoff", "failures", "state", "restarts"),
    [
        (0, 1, "Failed", 0),
        (1, 1, "Restarting", 1),
        (1, 2, "Failed", 1),
        (3, 3, "Restarting", 3),
        (3, 4, "Failed", 3),
    ],
)
def test_backoff_limit_bounds_restarts_across_the_job(backoff, failures, state, restarts):
    world = World(make_job(backoff=backoff))
    world.started()
    for i in range(failures):
        # failures alternate between the ps and the workers: the limit is for the whole job
        name = [world.pod("worker", 1), world.pod("ps", 0), world.pod("worker", 0)][i % 3]
        world.set_phase(name, "Failed", exit_code=137)
        world.settle()
        if world.status["state"] == "Failed":
            break
        world.run_all()
        world.settle()
    assert world.status["restarts"] == restarts
    if state == "Failed":
        assert world.status["state"] == "Failed"
        assert world.condition("Failed")["reason"] == "BackoffLimitExceeded"
    else:
        assert world.status["state"] == "Running"  # replaced and running again


def test_two_failures_at_once_over_the_limit_fail_the_job():
    world = World(make_job(backoff=1))
    world.started()
    world.set_phase(world.pod("worker", 0), "Failed", exit_code=137)
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=137)
    plan = world.step()
    assert world.status["state"] == "Failed"
    assert plan.of(MarkCounted) == []


# --- success ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "succeeded", "done"),
    [
        ("ChiefWorker", [0], True),
        ("ChiefWorker", [1], False),
        ("ChiefWorker", [1, 2], False),
        ("AllWorkers", [0], False),
        ("AllWorkers", [0, 1], False),
        ("AllWorkers", [0, 1, 2], True),
    ],
)
def test_success_policy(policy, succeeded, done):
    world = World(make_job(workers=3, success=policy))
    world.started()
    for i in succeeded:
        world.set_phase(world.pod("worker", i), "Succeeded", exit_code=0)
    world.step()
    assert (world.status["state"] == "Succeeded") is done
    if done:
        assert world.status["completionTime"]
        assert world.condition("Running")["status"] == "False"


# --- deadline --------------------------------------------------------------------------------------------


def test_active_deadline_fails_and_stops_running_pods_even_under_clean_policy_none():
    world = World(make_job(deadline=600, clean="None"))
    plan = world.step()
    assert plan.requeue_after == 600
    world.run_all()
    plan = world.step(minutes=5)
    assert plan.requeue_after == pytest.approx(300)
    assert world.status["state"] == "Running"
    plan = world.step(minutes=5)
    assert world.status["state"] == "Failed"
    assert world.condition("Failed")["reason"] == "DeadlineExceeded"
    assert kinds_names(plan.actions, Delete) == {("Pod", n) for n in ("pj-ps-0", "pj-worker-0", "pj-worker-1")}


# --- env servers of a remote placement -------------------------------------------------------------------

REMOTE = {"placement": "remote", "serversPerWorker": 2}


@pytest.mark.parametrize(
    ("policy", "exit_code", "state", "replaced"),
    [
        ("OnFailure", 1, "Restarting", True),
        ("ExitCode", 137, "Restarting", True),
        ("ExitCode", 2, "Failed", False),
        ("Never", 1, "Failed", False),
    ],
)
def test_a_failed_env_server_follows_its_own_restart_policy(policy, exit_code, state, replaced):
    world = World(make_job(environments={**REMOTE, "server": {"restartPolicy": policy}}))
    world.started()
    world.set_phase("pj-envserver-3", "Failed", exit_code=exit_code)
    world.settle()
    assert world.status["state"] == state
    if replaced:
        assert world.status["restarts"] == 1
        assert world.pods["pj-envserver-3"]["status"]["phase"] == "Pending"  # a new pod
        world.run_all()
        world.settle()
        assert world.status["state"] == "Running"
    else:
        assert "pj-envserver-3" in world.condition("Failed")["message"]


# --- pods that cannot start ------------------------------------------------------------------------------

NEVER_PULL = {
    "phase": "Pending",
    "containerStatuses": [
        {"name": "agents", "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}
    ],
}


@pytest.mark.parametrize(
    ("policy", "state", "reason"), [("ExitCode", "Restarting", None), ("Never", "Failed", "PodFailed")]
)
def test_a_pod_whose_image_can_never_start_follows_its_restart_policy(policy, state, reason):
    world = World(make_job(restart=policy))
    world.started()
    stuck = world.pod("worker", 1)
    world.pods[stuck]["status"] = copy.deepcopy(NEVER_PULL)
    plan = world.step()
    assert world.status["state"] == state
    if reason is None:
        assert Delete("Pod", stuck, "replacing the failed pod (restart 1)", 0) in plan.of(Delete)
        (event,) = [e for e in plan.events if e.reason == "PodFailed"]
        assert "ErrImageNeverPull: container agents: image not present" in event.message
    else:
        failed = world.condition("Failed")
        assert failed["reason"] == reason
        assert failed["message"].startswith(f"pod {stuck} failed (no exit code, ErrImageNeverPull: container agents")


def test_a_permanent_failure_quotes_what_the_container_said_last():
    world = World(make_job(restart="ExitCode"))
    world.started()
    failed = world.pod("worker", 0)
    world.set_phase(failed, "Failed", exit_code=2)
    world.pods[failed]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "error: bad env_id\n"
    world.step()
    assert world.condition("Failed")["message"] == (
        f"pod {failed} failed (exit code 2, Error: error: bad env_id); restartPolicy ExitCode treats 1-127 as permanent"
    )
