"""What the spec asks for and what is there (reconcile/observe.py): children rendered only for empty slots
and cached per spec, strays and pods of an earlier job told apart from the job's own."""

from __future__ import annotations

import pytest

from agents_operator import reconcile, render
from agents_operator.reconcile import Create, Delete
from tests.world import NOW, World, expected_children, make_job, make_pod


def kinds_names(actions, kind=Create):
    return {(a.kind, a.name) for a in actions if isinstance(a, kind)}


# --- rendering only what is needed ------------------------------------------------------------------------


def test_pods_are_rendered_only_for_empty_slots(monkeypatch):
    world = World(make_job(ps=2, workers=3))
    world.started()
    del world.pods["pj-worker-1"]
    rendered = []
    pod = render.pod
    monkeypatch.setattr(render, "pod", lambda job, t, i, o: rendered.append((t, i)) or pod(job, t, i, o))
    assert kinds_names(world.step().actions) == {("Pod", "pj-worker-1")}
    assert rendered == [("worker", 1)]


def test_the_cache_renders_the_other_children_once_per_spec(monkeypatch):
    world = World(make_job())
    calls = []
    others = render.non_pod_children
    monkeypatch.setattr(render, "non_pod_children", lambda job, o: calls.append(1) or others(job, o))
    world.started()
    world.set_phase("pj-worker-1", "Succeeded", exit_code=0)
    world.step()
    assert len(calls) == 1
    world.job["spec"]["replicaSpecs"]["worker"]["replicas"] = 3  # changed in place: the cache must notice
    assert ("Service", "pj-worker-2") in kinds_names(world.step().actions)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "change",
    [
        lambda job: job["spec"]["trainer"].update(metricsPort=9100),  # the chief's Service and the NetworkPolicy
        lambda job: job["metadata"].update(uid="00000000-0000-4000-8000-0000000000bb"),
        lambda job: job["metadata"].update(namespace="other"),
    ],
    ids=["spec", "uid", "namespace"],
)
def test_the_cache_is_keyed_by_everything_rendering_reads(change):
    job = make_job(tensorboard=True)
    cache = reconcile.DesiredCache()
    cached = reconcile.plan(job, [], now=NOW, cache=cache)
    change(job)
    assert reconcile.plan(job, [], now=NOW, cache=cache).actions == reconcile.plan(job, [], now=NOW).actions
    assert reconcile.plan(job, [], now=NOW, cache=cache).actions != cached.actions


def test_created_objects_are_the_plans_own():
    """A Create's object is copied from the cache: whoever executes the plan may change it."""
    world = World(make_job(tensorboard=True))
    first = world.plan()
    for create in first.of(Create):
        create.obj["metadata"]["name"] = "changed"
    assert world.plan().actions == reconcile.plan(world.job, [], now=NOW).actions


def test_pods_of_an_earlier_job_with_the_same_name_are_deleted_before_recreating():
    old = make_pod("pj", "worker", 0, owner="11111111-0000-4000-8000-000000000000")
    plan = reconcile.plan(make_job(), [old], now=NOW)
    assert Delete("Pod", "pj-worker-0", "owned by an earlier job of the same name") in plan.of(Delete)
    assert ("Pod", "pj-worker-0") not in kinds_names(plan.actions)


def test_stray_pods_are_deleted_and_foreign_pods_ignored():
    stray = make_pod("pj", "worker", 7)
    other_job = make_pod("other", "worker", 0)
    no_labels = {"metadata": {"name": "pj-worker-1", "labels": {}}, "status": {"phase": "Running"}}
    plan = reconcile.plan(make_job(), [stray, other_job, no_labels], now=NOW)
    assert Delete("Pod", "pj-worker-7", "not a replica of the spec") in plan.of(Delete)
    assert {a.name for a in plan.of(Delete)} == {"pj-worker-7"}
    assert ("Pod", "pj-worker-1") in kinds_names(plan.actions)


def test_pods_without_owner_references_are_ours_when_labels_and_name_match():
    """kmock gives no uids: children without ownerReferences are still recognised."""
    pods = [make_pod("pj", t, i, owner=None) for t, i in [("ps", 0), ("worker", 0), ("worker", 1)]]
    job = make_job(uid=None)
    plan = reconcile.plan(job, pods, now=NOW)
    assert kinds_names(plan.actions) == {(k, n) for k, n in expected_children(job) if k != "Pod"}
    assert plan.status["state"] == "Running"
