"""Table tests of reconcile.plan: every lifecycle policy as a function of (spec, observed children, now)."""

from __future__ import annotations

import copy

import pytest

from agents_operator import jobstatus, podview, reconcile, render
from agents_operator.reconcile import Create, Delete, DeleteJob, MarkCounted, WriteStatus

from .world import NOW, UID, World, expected_children, make_job, make_pod

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


# --- success and cleanup ---------------------------------------------------------------------------------


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


# --- deadline and TTL ------------------------------------------------------------------------------------


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


# --- bad input and strays --------------------------------------------------------------------------------


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
NEVER_PULL = {
    "phase": "Pending",
    "containerStatuses": [
        {"name": "agents", "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}
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
