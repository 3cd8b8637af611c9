"""What a plan asks its executor to do (reconcile/actions.py): a Create names its object, a Plan hands out its
actions by kind in their order and its status write as the patch."""

from __future__ import annotations

import pytest

from agents_operator.reconcile import Create, Delete, DeleteJob, MarkCounted, Plan, WriteStatus

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pj-worker-0"}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pj-worker-0"}}


def test_a_create_is_named_by_its_object():
    create = Create(POD)
    assert (create.kind, create.name) == ("Pod", "pj-worker-0")
    assert Create(SERVICE) != create  # same name, other kind: another child


def test_a_plan_gives_its_actions_of_one_kind_in_order():
    actions = [
        MarkCounted("pj-worker-1", 1),
        WriteStatus({"restarts": 1}),
        Delete("Pod", "pj-worker-1", "replacing the failed pod (restart 1)", 0),
        Create(SERVICE),
        Create(POD),
        DeleteJob("ttl"),
    ]
    plan = Plan(actions, status={"restarts": 1})
    assert plan.of(Create) == [Create(SERVICE), Create(POD)]
    assert plan.of(Delete) == [actions[2]]
    assert plan.of(DeleteJob) == [DeleteJob("ttl")]
    assert plan.status_patch == {"restarts": 1}


def test_a_plan_without_a_status_write_patches_nothing():
    plan = Plan([Create(POD)], status={"state": "Created"})
    assert plan.status_patch == {} and plan.of(WriteStatus) == []
    assert (plan.events, plan.requeue_after, plan.outcome) == ([], None, None)


def test_actions_are_values():
    with pytest.raises(AttributeError):
        Delete("Pod", "p", "why").name = "q"  # type: ignore[misc]
    assert MarkCounted("p", 2) == MarkCounted("p", 2) and hash(MarkCounted("p", 2)) == hash(MarkCounted("p", 2))
