"""`reconcile.plan`'s steps (steps.py), as table tests of (spec, observed children, now): what a new job
creates and when status is written, counting a restart once, the end of a job (cleanup, export, TTL),
suspend, bad input, env-server placements."""

from __future__ import annotations

import copy

import pytest

from agents_operator import jobstatus, podview, reconcile
from agents_operator.reconcile import Create, Delete, DeleteJob, MarkCounted, WriteStatus
from tests.world import NOW, UID, World, expected_children, make_job

# --- creation --------------------------------------------------------------------------------------------


def kinds_names(actions, kind=Create):
    return {(a.kind, a.name) for a in actions if isinstance(a, kind)}


@pytest.mark.parametrize(
    ("kwargs", "count"),
    [
        ({"ps": 1, "workers": 2}, 3 + 3),
        ({"ps": 0, "workers": 1}, 1 + 1),
        ({"ps": 2, "workers": 4, "evaluator": True}, 6 + 7),
        ({"ps": 1, "workers": 1, "tensorboard": True}, 2 + 2 + 1),  # + the TensorBoard Service
    ],
)
def test_new_job_creates_every_child_services_first(kwargs, count):
    job = make_job(**kwargs)
    plan = reconcile.plan(job, [], now=NOW)
    creates = plan.of(Create)
    assert kinds_names(creates) == expected_children(job)  # whatever render describes, nothing more
    assert sum(c.kind in ("Pod", "Service") for c in creates) == count
    kinds = [c.kind for c in creates]
    assert kinds.index("Pod") > max(
        i for i, k in enumerate(kinds) if k == "Service" and "tensorboard" not in creates[i].name
    )
    assert plan.status["state"] == "Created"
    assert plan.status["startTime"] == jobstatus.timestamp(NOW)
    assert plan.status["restarts"] == 0
    assert [e.reason for e in plan.events] == ["JobCreated"]
    if kwargs.get("tensorboard"):
        assert plan.status["tensorboardURL"] == "http://pj-tensorboard.ns.svc"


def test_children_carry_the_owner_reference_when_the_job_has_a_uid():
    for create in reconcile.plan(make_job(), [], now=NOW).of(Create):
        assert create.obj["metadata"]["ownerReferences"][0]["uid"] == UID


def test_second_pass_on_the_same_world_does_nothing():
    world = World(make_job())
    world.settle()
    assert world.step().actions == []


def test_creating_a_job_writes_its_status_once():
    """The pods a plan creates count as active in that plan's status: their watch events need no second write."""
    world = World(make_job())
    first = world.step()
    assert first.status["replicaStatuses"]["worker"] == {"active": 2, "succeeded": 0, "failed": 0}
    assert world.step().actions == []


def test_status_is_written_only_when_it_changes():
    world = World(make_job())
    world.started()
    plan = world.plan()
    assert plan.of(WriteStatus) == []
    world.now = world.now.replace(hour=13)  # time alone changes nothing
    assert world.plan().of(WriteStatus) == []


def test_status_patch_names_only_changed_keys():
    world = World(make_job())
    world.started()
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=1)
    patch = world.plan().status_patch
    assert set(patch) <= {"conditions", "replicaStatuses", "restarts", "state"}
    assert "progress" not in patch and "startTime" not in patch


def test_a_pod_deleted_by_someone_else_is_recreated_and_not_counted():
    world = World(make_job(), graceful=True)
    world.started()
    name = world.pod("worker", 1)
    world.pods[name]["metadata"]["deletionTimestamp"] = "2030-01-01T12:00:00Z"
    world.set_phase(name, "Failed", exit_code=143)  # SIGTERM while being deleted
    plan = world.step()
    assert plan.of(Create) == [] and plan.of(MarkCounted) == []  # the name is still taken: wait
    world.finish_terminating()
    plan = world.step()
    assert kinds_names(plan.actions) == {("Pod", name)}
    assert world.status["restarts"] == 0
    assert world.status["state"] != "Failed"


def test_counting_is_idempotent_when_the_same_plan_runs_twice_from_stale_inputs():
    world = World(make_job())
    world.started()
    failed = world.pod("worker", 1)
    world.set_phase(failed, "Failed", exit_code=1)
    stale_job, stale_pods = copy.deepcopy(world.job), copy.deepcopy(world.pods)
    world.step()
    assert world.status["restarts"] == 1
    # The watch has delivered the new status but not yet the pod's deletion, nor the marker on it.
    again = reconcile.plan(world.job, [stale_pods[failed]], now=world.now)
    assert again.status["restarts"] == 2  # this is what kube.Cache.overlay prevents:
    views = podview.overlay([podview.view_pod(stale_pods[failed])], deleting=[failed], counted={failed: 1})
    again = reconcile.plan(world.job, views, now=world.now)
    assert again.status["restarts"] == 1
    assert again.of(MarkCounted) == []
    # The status write was lost but the marker landed: the marker wins.
    assert reconcile.plan(stale_job, [], now=world.now).status["restarts"] == 0
    marked = copy.deepcopy(stale_pods[failed])
    marked["metadata"]["annotations"] = {podview.ANNOTATION_COUNTED: "1"}
    again = reconcile.plan(stale_job, [marked], now=world.now)
    assert again.status["restarts"] == 1
    assert again.of(MarkCounted) == []
    assert Delete("Pod", failed, "replacing the failed pod (restart 1)", 0) in again.of(Delete)


@pytest.mark.parametrize("upto", [0, 1, 2, 3])
def test_operator_stopping_anywhere_in_a_restart_counts_it_once(upto):
    world = World(make_job())
    world.started()
    failed = world.pod("worker", 1)
    world.set_phase(failed, "Failed", exit_code=1)
    plan = world.plan()
    assert [type(a) for a in plan.actions] == [MarkCounted, WriteStatus, Delete]
    world.apply(plan, upto=upto)  # stopped after `upto` actions; a new operator takes over
    world.settle()
    world.run_all()
    world.settle()
    assert world.status["restarts"] == 1
    assert world.status["state"] == "Running"


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("Running", {"ps-0", "worker-1", "evaluator-0"}),
        ("All", {"ps-0", "worker-0", "worker-1", "worker-2", "evaluator-0"}),
        ("None", set()),
    ],
)
def test_clean_pod_policy_after_success(policy, deleted):
    world = World(make_job(workers=3, evaluator=True, clean=policy))
    world.started()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.set_phase(world.pod("worker", 2), "Failed", exit_code=1)  # finished: stays under Running
    world.set_phase(world.pod("worker", 2), "Succeeded", exit_code=0)
    world.settle()
    assert world.status["state"] == "Succeeded"
    gone = {n.removeprefix("pj-") for n in ("pj-ps-0", "pj-worker-0", "pj-worker-1", "pj-worker-2", "pj-evaluator-0")}
    assert gone - {n.removeprefix("pj-") for n in world.pods} == deleted
    assert (world.services == {}) is (policy != "None")
    # the final replica statuses survive cleanup
    assert world.status["replicaStatuses"]["worker"]["succeeded"] == 2
    assert world.status["replicaStatuses"]["ps"]["active"] == 0 or policy == "None"


def test_finished_job_is_never_reopened():
    world = World(make_job(clean="None"))
    world.started()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.settle()
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=1)
    del world.pods[world.pod("ps", 0)]
    plan = world.step()
    assert plan.of(Create) == [] and plan.of(MarkCounted) == []
    assert world.status["state"] == "Succeeded"


def test_tensorboard_stays_after_the_job_finishes():
    world = World(make_job(tensorboard=True, clean="All"))
    world.started()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.settle()
    assert set(world.services) == {"pj-tensorboard"}
    assert set(world.deployments) == {"pj-tensorboard"}


@pytest.mark.parametrize(
    ("claim", "trainer", "expected"),
    [
        ("runs", {}, {"path": "/var/run/agents/pj/exported", "claimName": "runs"}),
        ("runs", {"export": False}, None),
        (None, {}, None),  # emptyDir: the export goes with the chief's pod
    ],
)
def test_a_job_that_succeeds_names_its_export_when_it_outlives_the_pods(claim, trainer, expected):
    job = make_job(claim=claim)
    job["spec"]["trainer"].update(trainer)
    world = World(job)
    world.started()
    world.step()
    assert "export" not in world.status
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.settle()
    assert world.status["state"] == "Succeeded"
    assert world.status.get("export") == expected


def test_a_job_that_fails_names_no_export():
    world = World(make_job(restart="Never", claim="runs"))
    world.started()
    world.set_phase(world.pod("worker", 0), "Failed", exit_code=1)
    world.settle()
    assert world.status["state"] == "Failed" and "export" not in world.status


@pytest.mark.parametrize(("ttl", "minutes", "deleted"), [(0, 0, True), (600, 5, False), (600, 10, True)])
def test_ttl_after_finished_deletes_the_job(ttl, minutes, deleted):
    world = World(make_job(ttl=ttl))
    world.started()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    plan = world.step()
    if ttl:
        assert plan.requeue_after == ttl
        plan = world.step(minutes=minutes)
    assert (world.job is None) is deleted
    if not deleted:
        assert plan.requeue_after == pytest.approx(ttl - minutes * 60)


# --- suspend ---------------------------------------------------------------------------------------------


def test_suspend_deletes_pods_keeps_status_and_resume_recreates_them():
    world = World(make_job(deadline=3600))
    world.started()
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=137)
    world.settle()
    world.run_all()
    world.settle()
    assert world.status["restarts"] == 1
    world.job["spec"]["runPolicy"]["suspend"] = True
    plan = world.step(minutes=50)
    assert kinds_names(plan.actions, Delete) == {("Pod", n) for n in ("pj-ps-0", "pj-worker-0", "pj-worker-1")}
    assert world.status["state"] == "Suspended"
    assert world.status["restarts"] == 1
    assert world.pods == {} and len(world.services) == 3  # Services are kept
    world.step(minutes=60)  # no deadline while suspended
    assert world.status["state"] == "Suspended"
    world.job["spec"]["runPolicy"]["suspend"] = False
    plan = world.step()
    assert kinds_names(plan.actions) == {("Pod", n) for n in ("pj-ps-0", "pj-worker-0", "pj-worker-1")}
    assert world.condition("Suspended")["status"] == "False"
    assert world.status["startTime"] == jobstatus.timestamp(world.now)  # the deadline restarts
    assert world.status["restarts"] == 1
    assert [e.reason for e in world.events][-2:] == ["JobSuspended", "JobResumed"]


def test_suspended_pods_killed_by_the_suspension_are_not_failures():
    world = World(make_job(restart="Never"), graceful=True)
    world.started()
    world.job["spec"]["runPolicy"]["suspend"] = True
    world.step()
    for name in list(world.pods):
        world.set_phase(name, "Failed", exit_code=143)
    world.step()
    assert world.status["state"] == "Suspended"


# --- bad input -------------------------------------------------------------------------------------------


def test_unknown_preset_fails_with_invalid_spec_once():
    world = World(make_job(preset="no_such_preset"))
    plan = world.step()
    assert plan.of(Create) == []
    assert world.status["state"] == "Failed"
    assert world.condition("Failed")["reason"] == "InvalidSpec"
    assert "no_such_preset" in world.condition("Failed")["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidSpec")]
    assert world.status["observedGeneration"] == 1  # judged: only a new spec wakes the operator again
    assert world.step().actions == []


def test_garbage_status_is_not_fatal():
    job = make_job(job_status={"conditions": "nonsense", "restarts": -4, "kopf": {"x": 1}})
    plan = reconcile.plan(job, [], now=NOW)
    assert plan.status["state"] == "Created"


def test_observed_generation_follows_metadata():
    job = make_job()
    job["metadata"]["generation"] = 7
    assert reconcile.plan(job, [], now=NOW).status["observedGeneration"] == 7


def test_requeue_and_delete_job():
    job = make_job(ttl=0, job_status={"conditions": [{"type": "Succeeded", "status": "True"}]})
    plan = reconcile.plan(job, [], now=NOW)
    assert plan.of(DeleteJob)


def test_a_job_being_deleted_is_left_alone():
    job = make_job()
    job["metadata"]["deletionTimestamp"] = "2030-01-01T11:00:00Z"
    plan = reconcile.plan(job, [], now=NOW)
    assert plan.actions == [] and plan.events == []


# --- env servers of a remote placement -------------------------------------------------------------------

REMOTE = {"placement": "remote", "serversPerWorker": 2}


def test_remote_env_servers_are_created_with_their_services_and_counted_in_status():
    job = make_job(environments=REMOTE)
    plan = reconcile.plan(job, [], now=NOW)
    assert kinds_names(plan.of(Create)) == expected_children(job)
    pods = [c.name for c in plan.of(Create) if c.kind == "Pod"]
    assert pods == ["pj-ps-0", *(f"pj-envserver-{i}" for i in range(4)), "pj-worker-0", "pj-worker-1"]
    assert {f"pj-envserver-{i}" for i in range(4)} <= {c.name for c in plan.of(Create) if c.kind == "Service"}

    world = World(job)
    world.settle()
    for name in ("pj-ps-0", "pj-worker-0", "pj-worker-1", "pj-envserver-0"):
        world.set_phase(name, "Running")
    world.step()
    assert world.status["state"] == "Created"  # three env servers still pending: workers cannot train
    world.run_all()
    world.step()
    assert world.status["state"] == "Running"
    assert world.status["replicaStatuses"]["envserver"] == {"active": 4, "succeeded": 0, "failed": 0}


@pytest.mark.parametrize("policy", ["Running", "None"])
def test_running_env_servers_are_deleted_when_the_job_ends_whatever_the_clean_policy(policy):
    world = World(make_job(clean=policy, environments=REMOTE))
    world.started()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.settle()
    assert world.status["state"] == "Succeeded"
    assert not any("-envserver-" in name for name in world.pods)  # they never exit by themselves
    assert ("pj-worker-1" in world.pods) is (policy == "None")
    assert world.status["replicaStatuses"]["envserver"]["active"] == 0


def test_sidecar_placement_adds_containers_not_pods():
    job = make_job(environments={"placement": "sidecar"})
    plan = reconcile.plan(job, [], now=NOW)
    assert [c.name for c in plan.of(Create) if c.kind == "Pod"] == ["pj-ps-0", "pj-worker-0", "pj-worker-1"]
    worker = next(c.obj for c in plan.of(Create) if c.kind == "Pod" and c.name == "pj-worker-0")
    assert [c["name"] for c in worker["spec"]["initContainers"]] == ["env-server"]


# --- an elastic job scaled ----------------------------------------------------------------------------------


def test_an_elastic_job_scaled_up_then_down_adds_and_removes_the_highest_workers_and_says_so():
    world = World(make_job(workers=1, elastic={"minWorkers": 1, "maxWorkers": 4}), graceful=True)
    world.started()
    assert world.status["workers"] == 1
    assert world.status["workerSelector"] == "agents.dev/job-name=pj,agents.dev/replica-type=worker"
    untouched = copy.deepcopy(world.pods)
    world.job["spec"]["replicaSpecs"]["worker"]["replicas"] = 3  # kubectl scale --replicas=3
    plan = world.step()
    assert kinds_names(plan.actions) == {("Pod", "pj-worker-1"), ("Pod", "pj-worker-2")} | {
        ("Service", "pj-worker-1"),
        ("Service", "pj-worker-2"),
    }
    assert not plan.of(Delete)
    assert [(e.reason, e.message) for e in plan.events if e.reason == "Scaled"] == [("Scaled", "workers 1 -> 3: added")]
    assert world.status["workers"] == 3
    assert all(world.pods[name] == pod for name, pod in untouched.items())  # no other pod restarts
    world.run_all()
    world.settle()
    world.job["spec"]["replicaSpecs"]["worker"]["replicas"] = 2
    plan = world.step()
    assert [(d.kind, d.name, d.reason, d.grace_seconds) for d in plan.of(Delete)] == [
        ("Pod", "pj-worker-2", "scaled to 2 worker(s) (replicaSpecs.worker.replicas)", None),  # SIGTERM, its grace
        ("Service", "pj-worker-2", "not a child of the spec", None),
    ]
    assert [e.message for e in plan.events if e.reason == "Scaled"] == [
        "workers 3 -> 2: removed, the highest indices first"
    ]
    world.set_phase("pj-worker-2", "Failed", exit_code=143)  # it left on SIGTERM while being deleted
    plan = world.step()
    assert world.status["restarts"] == 0 and not plan.of(Create)  # not a failure, not replaced
    world.finish_terminating()
    world.settle()
    assert sorted(world.pods) == ["pj-ps-0", "pj-worker-0", "pj-worker-1"]
    assert world.condition("Running")["status"] == "True"


def test_every_replica_of_an_elastic_job_lists_every_worker_slot_so_no_pod_changes_when_it_scales():
    from agents_operator import api, render
    from tests.render.examples import tf_config_of

    def tf_config(workers, name):
        job = api.parse_job(make_job(workers=workers, elastic={"maxWorkers": 4}))
        pod, config_map = render.pod(job, *name), render.cluster_config(job)
        return tf_config_of(pod, config_map), pod, config_map

    config, pod, config_map = tf_config(2, ("worker", 1))
    assert config.num_workers == 4 and config.cluster["worker"][3] == "pj-worker-3.ns.svc:2222"
    assert tf_config(3, ("worker", 1))[1:] == (pod, config_map)
    assert tf_config(1, ("ps", 0))[1:] == tf_config(4, ("ps", 0))[1:]
