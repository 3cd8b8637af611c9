"""The operator's lifecycle rules on a real API server, one namespace per test, the chart's operator serving.

The API server does what no emulator does: uids and owner references, resourceVersions, label selectors, the
status subresource with schema pruning, garbage collection, CRD validation.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from agents_operator import metrics_server
from tests.e2e.cluster import MERGE, jobs_path, wait_for

pytestmark = pytest.mark.timeout(300)


def test_create_makes_every_child_with_owner_references(cluster):
    job = cluster.create_job()
    wait_for(lambda: cluster.live_pods() == {"pj-ps-0", "pj-worker-0", "pj-worker-1"}, 60, "pods")
    wait_for(lambda: cluster.services() == {"pj-ps-0", "pj-worker-0", "pj-worker-1"}, 60, "services")
    for pod in cluster.pods().values():
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["uid"] == job["metadata"]["uid"] and owner["controller"] is True
    wait_for(lambda: cluster.state() == "Created", 30, "Created")
    st = cluster.status()
    assert st["observedGeneration"] == 1 and st["startTime"]
    assert not any(k.startswith("kopf") for k in st)
    wait_for(lambda: cluster.events("SuccessfulCreate"), 30, "events")
    assert [e["message"] for e in cluster.events("SuccessfulCreate")] == [
        "Created networkpolicy pj-replicas, configmap pj-cluster, 3 services (pj-ps-0, pj-worker-0, pj-worker-1) "
        "and 3 pods (pj-ps-0, pj-worker-0, pj-worker-1)"
    ]
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running")


def _pod_event(cluster, pod: dict, reason: str, message: str, uid: str | None = None) -> None:
    """An Event about `pod` as the kubelet posts one."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta = pod["metadata"]
    involved = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": cluster.ns}
    event = {
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": {**involved, "uid": uid or meta["uid"]},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": "kubelet", "host": "node"},
    }
    cluster.kube.request("POST", f"/api/v1/namespaces/{cluster.ns}/events", body=event)


def test_a_pod_that_cannot_mount_a_volume_is_said_from_its_events(cluster):
    """The status of a pod whose volume the kubelet cannot mount says only ContainerCreating: the operator reads
    the reason from the pod's Events, through the real server's field selector and the chart's RBAC."""
    cluster.create_job()
    wait_for(lambda: len(cluster.live_pods()) == 3, 60, "pods")
    pods = cluster.pods()
    missing = 'MountVolume.SetUp failed for volume "config" : configmap "settings" not found'
    _pod_event(cluster, pods["pj-worker-1"], "FailedMount", missing)
    _pod_event(cluster, pods["pj-worker-0"], "FailedMount", "of an earlier pod", uid="0000-earlier")
    failure = wait_for(
        lambda: next((c for c in cluster.status().get("conditions", []) if c["reason"] == "FailedMount"), None),
        30,
        "ReplicaFailure FailedMount",
    )
    assert (failure["type"], failure["status"]) == ("ReplicaFailure", "True")
    assert failure["message"] == f"pod pj-worker-1 cannot start: {missing}"  # worker-0's is an earlier pod's
    assert cluster.state() == "ReplicaFailure"
    wait_for(
        lambda: any(e["involvedObject"]["kind"] == "AgentsJob" for e in cluster.events("FailedMount")), 30, "Event"
    )
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running once the pods start")


@pytest.mark.parametrize(
    ("policy", "exit_code", "replaced"),
    [
        ("OnFailure", 1, True),
        ("Always", 1, True),
        ("ExitCode", 137, True),
        ("ExitCode", 1, False),
        ("Never", 137, False),
    ],
)
def test_restart_policies(cluster, policy, exit_code, replaced):
    cluster.started(restart=policy)
    cluster.set_phase("pj-worker-1", "Failed", exit_code)
    if replaced:
        wait_for(lambda: cluster.status().get("restarts") == 1, 60, "restart counted")
        wait_for(
            lambda: (cluster.pods().get("pj-worker-1", {}).get("status") or {}).get("phase") == "Pending",
            60,
            "replacement",
        )
        cluster.set_phase("pj-worker-1", "Running")
        wait_for(lambda: cluster.state() == "Running", 60, "Running again")
        assert cluster.status()["restarts"] == 1
    else:
        wait_for(lambda: cluster.state() == "Failed", 60, "Failed")
        assert cluster.status()["restarts"] == 0
        wait_for(lambda: cluster.live_pods() == {"pj-worker-1"}, 60, "cleanup keeps the failed pod")


def test_backoff_limit_bounds_restarts(cluster):
    cluster.started(backoff=1)
    cluster.set_phase("pj-worker-1", "Failed", 137)
    wait_for(lambda: cluster.status().get("restarts") == 1, 60, "first restart")
    wait_for(
        lambda: (cluster.pods().get("pj-worker-1", {}).get("status") or {}).get("phase") == "Pending", 60, "replacement"
    )
    cluster.set_phase("pj-worker-1", "Running")
    cluster.set_phase("pj-ps-0", "Failed", 137)
    wait_for(lambda: cluster.state() == "Failed", 60, "Failed")
    assert cluster.status()["conditions"][-1]["reason"] == "BackoffLimitExceeded"


def test_success_deletes_the_ps_and_running_workers(cluster):
    cluster.started()
    cluster.set_phase("pj-worker-0", "Succeeded", 0)
    wait_for(lambda: cluster.state() == "Succeeded", 60, "Succeeded")
    wait_for(lambda: cluster.live_pods() == {"pj-worker-0"}, 60, "ps and running worker deleted")
    wait_for(lambda: cluster.services() == set(), 60, "services deleted")
    assert cluster.status()["replicaStatuses"]["worker"]["succeeded"] == 1


def test_a_job_on_a_claim_that_succeeds_names_its_export(cluster):
    cluster.started(claim="runs")
    assert "export" not in cluster.status()
    cluster.set_phase("pj-worker-0", "Succeeded", 0)
    wait_for(lambda: cluster.state() == "Succeeded", 60, "Succeeded")
    assert cluster.status()["export"] == {"path": "/var/run/agents/pj/exported", "claimName": "runs"}


def test_suspend_and_resume(cluster, kube):
    cluster.started()
    kube.request(
        "PATCH", f"{jobs_path(cluster.ns)}/pj", body={"spec": {"runPolicy": {"suspend": True}}}, content_type=MERGE
    )
    wait_for(lambda: cluster.state() == "Suspended", 60, "Suspended")
    wait_for(lambda: cluster.live_pods() == set(), 60, "pods deleted")
    kube.request(
        "PATCH",
        f"{jobs_path(cluster.ns)}/pj",
        body={"spec": {"runPolicy": {"suspend": False}}},
        content_type=MERGE,
    )
    wait_for(lambda: len(cluster.live_pods()) == 3, 60, "pods recreated")


def test_active_deadline(cluster):
    cluster.create_job(deadline=5)
    wait_for(lambda: len(cluster.live_pods()) == 3, 60, "pods")
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Failed", 60, "DeadlineExceeded")
    assert cluster.status()["conditions"][-1]["reason"] == "DeadlineExceeded"
    wait_for(lambda: cluster.live_pods() == set(), 60, "running pods deleted")


def test_ttl_after_finished_deletes_the_job(cluster):
    cluster.started(ttl=3)
    cluster.set_phase("pj-worker-0", "Succeeded", 0)
    wait_for(lambda: cluster.job() is None, 60, "job deleted by its TTL")
    wait_for(lambda: cluster.live_pods() == set(), 60, "children gone (GC or the operator)")


def test_pod_deleted_by_hand_is_recreated_and_not_counted(cluster, kube):
    cluster.started()
    kube.delete("Pod", cluster.ns, "pj-ps-0")
    wait_for(lambda: (cluster.pods().get("pj-ps-0", {}).get("status") or {}).get("phase") == "Pending", 60, "recreated")
    assert cluster.status()["restarts"] == 0


def test_invalid_spec_fails_with_invalid_spec_and_others_are_served(cluster):
    cluster.create_job("bad", preset="no_such_preset")
    cluster.started("good")
    wait_for(lambda: cluster.state("bad") == "Failed", 60, "Failed")
    assert cluster.status("bad")["conditions"][-1]["reason"] == "InvalidSpec"
    wait_for(lambda: cluster.events("InvalidSpec"), 10, "an InvalidSpec Event")  # posted after the status
    assert cluster.pods("bad") == {}


def test_operator_killed_mid_reconcile_leaves_no_duplicates_or_orphans(cluster, operator, kube):
    operator.stop()
    cluster.create_job()
    operator.start()
    wait_for(lambda: len(cluster.pods()) >= 1, 60, "the first pod")
    operator.kill()  # killed while creating
    operator.start()
    wait_for(lambda: cluster.live_pods() == {"pj-ps-0", "pj-worker-0", "pj-worker-1"}, 60, "all pods")
    wait_for(lambda: cluster.services() == {"pj-ps-0", "pj-worker-0", "pj-worker-1"}, 60, "all services")
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running")
    # A failure counted (marker on the pod) by an operator that died before writing status:
    operator.kill()
    kube.annotate("Pod", cluster.ns, "pj-worker-1", {"agents.dev/restart-counted": "1"})
    cluster.set_phase("pj-worker-1", "Failed", 137)
    operator.start()
    wait_for(lambda: cluster.status().get("restarts") == 1, 60, "restart counted once")
    time.sleep(3)
    assert cluster.status()["restarts"] == 1


def test_deleting_the_job_leaves_no_orphans(cluster, kube):
    cluster.started()
    kube.delete("AgentsJob", cluster.ns, "pj")
    wait_for(lambda: cluster.live_pods() == set() and cluster.services() == set(), 60, "children gone")


def test_remote_env_servers_live_and_die_with_the_job(cluster):
    cluster.create_job(workers=1, environments={"placement": "remote", "serversPerWorker": 2})
    servers = {"pj-envserver-0", "pj-envserver-1"}
    wait_for(lambda: cluster.live_pods() == {"pj-ps-0", "pj-worker-0", *servers}, 60, "pods")
    wait_for(lambda: servers <= cluster.services(), 60, "env-server services")
    for name in servers:
        (container,) = cluster.pods()[name]["spec"]["containers"]
        assert container["readinessProbe"]["grpc"]["port"] == 50051  # the API server kept the gRPC probes
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running")
    assert cluster.status()["replicaStatuses"]["envserver"]["active"] == 2
    cluster.set_phase("pj-envserver-1", "Failed", 1)
    wait_for(lambda: cluster.status().get("restarts") == 1, 60, "restart counted")
    wait_for(
        lambda: (cluster.pods().get("pj-envserver-1", {}).get("status") or {}).get("phase") == "Pending",
        60,
        "replacement",
    )
    cluster.set_phase("pj-envserver-1", "Running")
    cluster.set_phase("pj-worker-0", "Succeeded", 0)
    wait_for(lambda: cluster.state() == "Succeeded", 60, "Succeeded")
    wait_for(lambda: cluster.live_pods() == {"pj-worker-0"}, 60, "env servers deleted")


def test_sidecar_pods_are_accepted_and_bad_placements_rejected_by_the_crd(cluster):
    from agents_operator.kube import ApiError

    cluster.create_job(workers=1, environments={"placement": "sidecar", "mode": "rollout"})
    wait_for(lambda: "pj-worker-0" in cluster.live_pods(), 60, "worker pod")
    (sidecar,) = cluster.pods()["pj-worker-0"]["spec"]["initContainers"]
    assert sidecar["name"] == "env-server" and sidecar["restartPolicy"] == "Always"
    with pytest.raises(ApiError) as err:
        cluster.create_job("bad", workers=1, environments={"placement": "sidecar", "serversPerWorker": 2})
    assert err.value.status == 422 and "serversPerWorker applies to placement remote only" in str(err.value)
    job = cluster.job()
    with pytest.raises(ApiError) as err:
        cluster.kube.request(
            "PATCH",
            f"{jobs_path(cluster.ns)}/pj",
            body={"spec": {"environments": {"placement": "colocated"}}},
            content_type=MERGE,
        )
    assert err.value.status == 422 and "environments is immutable" in str(err.value)
    assert cluster.job()["spec"]["environments"] == job["spec"]["environments"]


def test_children_orphaned_by_a_deletion_are_deleted_by_the_operator(cluster):
    """`propagationPolicy: Orphan` makes the garbage collector leave the children without an owner: the
    operator recognises them by label and name and deletes them once the API confirms the job is gone."""
    cluster.started()
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Orphan"}
    cluster.kube.request("DELETE", f"{jobs_path(cluster.ns)}/pj", body=body)
    wait_for(lambda: cluster.job() is None, 60, "job deleted")
    wait_for(lambda: not cluster.live_pods() and not cluster.services(), 60, "orphans deleted")


def test_probes_and_metrics_where_the_chart_points_them(cluster, operator):
    cluster.started()

    def probed_running() -> int:
        with urllib.request.urlopen(operator.health, timeout=5) as response:
            assert response.status == 200
            return json.loads(response.read())["jobs"].get("Running", 0)

    wait_for(probed_running, 30, "Running in the probe (kopf keeps a probe's result for 10 s)")
    wait_for(lambda: operator.metric('agents_operator_jobs{state="Running"}') >= 1, 30, "jobs gauge")
    assert operator.metric("agents_operator_children_created_total") >= 7
    assert operator.metric("agents_operator_reconcile_seconds_count") >= 1


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_silent_connections_to_the_metrics_port_cost_the_operator_no_threads(operator):
    """Each connection to prometheus_client's own server held a thread while the client stayed silent."""
    port = int(next(a.split("=", 1)[1] for a in operator.args if a.startswith("--metrics-port=")))
    before = _threads(operator.process.pid)
    flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(3 * metrics_server.MAX_CONNECTIONS)]
    try:
        assert operator.metric("agents_operator_reconcile_seconds_count") >= 0  # answered during the flood
        assert _threads(operator.process.pid) <= before + 2
    finally:
        for sock in flood:
            sock.close()
