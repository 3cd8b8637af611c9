"""Controller (handlers.py) with a fake API: its memory of its own writes covers a watch that lags behind."""

from __future__ import annotations

import asyncio
import copy

import pytest

from agents_operator import reconcile, status
from agents_operator.handlers import Controller
from agents_operator.kube import ApiError, Outcome

from .world import NOW, World, make_job

KEY = ("ns", "pj")


class FakeKube:
    """Executes nothing; records plans. `fail_after` raises after that many actions (an API error mid-plan)."""

    def __init__(self) -> None:
        self.plans: list[reconcile.Plan] = []
        self.fail_after: int | None = None
        self.refuse: set[str] = set()
        """Names of children whose create the API server refuses."""

    def execute(self, job, plan, now=None) -> Outcome:
        self.plans.append(plan)
        outcome = Outcome()
        for i, action in enumerate(plan.actions):
            if self.fail_after is not None and i >= self.fail_after:
                err = ApiError(500, "boom")
                err.outcome = outcome  # type: ignore[attr-defined]
                raise err
            outcome.done.append(action)
            if isinstance(action, reconcile.WriteStatus):
                outcome.status_written = True
            if isinstance(action, reconcile.Create) and action.name in self.refuse:
                outcome.refused.append(reconcile.Refusal(action.kind, action.name, 403, "exceeded quota"))
        return outcome

    def get(self, *args):
        return None


def running_world() -> World:
    world = World(make_job())
    world.started()
    return world


def controller_for(world: World, pods: list[dict] | None = None) -> tuple[Controller, FakeKube]:
    fake = FakeKube()
    controller = Controller(fake)  # type: ignore[arg-type]
    controller.now = lambda: NOW
    set_indexes(controller, world, pods)
    return controller, fake


def set_indexes(controller: Controller, world: World, pods: list[dict] | None = None) -> None:
    """What kopf's indexes would hold: possibly stale pods."""
    pods = list(world.pods.values()) if pods is None else pods
    controller.indexes = {
        "agents_jobs": {KEY: [copy.deepcopy(world.job)]},
        "agents_pods": {KEY: [status.view_pod(p) for p in pods]},
        "agents_services": {KEY: [status.view_child(s) for s in world.services.values()]},
        "agents_deployments": {},
    }


async def test_a_lagging_watch_does_not_count_a_failure_twice():
    world = running_world()
    world.set_phase("pj-worker-1", "Failed", exit_code=1)
    stale_pods = copy.deepcopy(list(world.pods.values()))
    controller, _ = controller_for(world)
    plan = await controller.reconcile(KEY)
    assert plan.of(reconcile.MarkCounted) == [reconcile.MarkCounted("pj-worker-1", 1)]
    world.apply(plan)
    # The job's watch has delivered the new status; the pod's watch has delivered nothing yet.
    set_indexes(controller, world, stale_pods)
    again = await controller.reconcile(KEY)
    assert again.of(reconcile.MarkCounted) == [] and again.of(reconcile.Delete) == []
    assert again.status["restarts"] == 1
    # Neither watch has delivered anything: the status the operator wrote is used, not the stale one.
    world_before = running_world()
    world_before.set_phase("pj-worker-1", "Failed", exit_code=1)
    set_indexes(controller, world_before, stale_pods)
    third = await controller.reconcile(KEY)
    assert third.of(reconcile.MarkCounted) == [] and third.status["restarts"] == 1


async def test_what_happened_before_an_api_error_is_remembered():
    world = running_world()
    world.set_phase("pj-worker-1", "Failed", exit_code=1)
    controller, fake = controller_for(world)
    fake.fail_after = 1  # the marker lands, the status write fails
    with pytest.raises(ApiError):
        await controller.reconcile(KEY)
    fake.fail_after = None
    plan = await controller.reconcile(KEY)  # the indexes have not seen the marker
    assert plan.of(reconcile.MarkCounted) == []
    assert plan.status["restarts"] == 1
    assert [a.name for a in plan.of(reconcile.Delete)] == ["pj-worker-1"]


async def test_kicks_are_coalesced_and_errors_retried():
    world = running_world()
    del world.pods["pj-ps-0"]  # something to do
    controller, fake = controller_for(world)
    fake.fail_after = 0
    for _ in range(5):
        controller.kick(KEY)
    await controller.tasks[KEY]
    assert len(fake.plans) <= 2  # five kicks, at most one run plus one rerun
    assert controller.memory[KEY].failures == 1 and KEY in controller.wakeups  # retried later
    await controller.shutdown()


async def test_children_of_a_job_that_is_gone_are_deleted():
    world = running_world()
    controller, _ = controller_for(world)
    controller.indexes["agents_jobs"] = {}
    deleted = []
    controller.kube.delete = lambda kind, ns, name, grace=None: deleted.append((kind, name))  # type: ignore[attr-defined]
    await controller.reconcile(KEY)
    assert sorted(deleted) == sorted([("Pod", n) for n in world.pods] + [("Service", n) for n in world.services])


async def test_refused_children_are_reported_at_once_and_retried_with_backoff():
    world = World(make_job())
    controller, fake = controller_for(world)
    fake.refuse = {"pj-ps-0", "pj-worker-0", "pj-worker-1"}
    for failures in (1, 2, 3):
        if KEY in controller.wakeups:
            controller.wakeups[KEY].cancel()
        controller._wake(KEY)  # the wake-up the last failure scheduled (not waited for)
        await controller.tasks[KEY]
        report = fake.plans[-1]  # the reconcile's second plan: the refusals, in the same reconcile
        assert report.status["state"] == "ReplicaFailure"
        assert [e.reason for e in report.events] == (
            ["FailedCreate"] * 6 if failures == 1 else []
        )  # 3 Services, 3 Pods
        assert controller.memory[KEY].failures == failures
        assert controller.wakeups[KEY].when() - asyncio.get_running_loop().time() > 0.5 * 2**failures - 0.1
    fake.refuse = set()
    await controller.reconcile(KEY)
    assert controller.memory[KEY].failures == 0
    await controller.shutdown()
