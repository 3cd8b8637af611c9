"""kube.py against an emulated API server: paths, idempotence by status code, status patches, Events."""

from __future__ import annotations

import asyncio

import attrs
import kmock
import pytest

from agents_operator import kube, naming, podview, reconcile
from tests.world import NOW, make_job


@pytest.fixture
def client(kmock: kmock.KubernetesEmulator):
    for resource, kind in (
        ("agents.dev/v1alpha1/agentsjobs", naming.KIND),
        ("v1/pods", "Pod"),
        ("v1/services", "Service"),
        ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
        ("v1/events", "Event"),
    ):
        kmock.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True)
    c = kube.Kube.connect(host=str(kmock.url))
    yield c
    c.close()


@attrs.frozen
class Forbidden(kmock.KubernetesError):
    status: int = 403
    reason: str = "Forbidden"
    message: str = "pods is forbidden"


def test_paths():
    assert kube.path("Pod", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert kube.path("Deployment", "ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert kube.path(naming.KIND, "ns", "j", "status") == "/apis/agents.dev/v1alpha1/namespaces/ns/agentsjobs/j/status"


async def test_create_and_delete_are_idempotent(client, kmock):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    assert await asyncio.to_thread(client.create, pod) is True
    assert await asyncio.to_thread(client.create, pod) is False  # 409: already there
    assert await asyncio.to_thread(client.delete, "Pod", "ns", "p", 0) is True
    assert await asyncio.to_thread(client.delete, "Pod", "ns", "p") is False  # 404: gone already
    deletes = [r for r in list(kmock) if r.method == "DELETE"]
    assert deletes[0].data == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
        "gracePeriodSeconds": 0,
    }


async def test_status_patch_is_a_merge_patch_of_the_status_subresource(client, kmock):
    job = make_job()
    kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"] = job
    assert await asyncio.to_thread(client.patch_status, "ns", "pj", {"restarts": 2, "state": "Running"})
    (request,) = [r for r in list(kmock) if r.method == "PATCH"]
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert str(request.url).endswith("/agentsjobs/pj/status")
    assert kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"]["status"] == {"restarts": 2, "state": "Running"}
    assert await asyncio.to_thread(client.patch_status, "ns", "gone", {"restarts": 1}) is None


async def test_execute_runs_a_plan_in_order_and_posts_events(client, kmock):
    job = make_job()
    kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"] = job
    plan = reconcile.plan(job, [], now=NOW)
    outcome = await asyncio.to_thread(client.execute, job, plan, NOW)
    assert outcome.created["Service"] == 3 and outcome.created["Pod"] == 3 and outcome.status_written
    methods = [(r.method, str(r.url).split("/namespaces/ns/")[1].split("/")[0]) for r in list(kmock)]
    first_pod = methods.index(("POST", "pods"))
    assert methods[0] == ("PATCH", "agentsjobs")  # status first
    assert all(m != ("POST", "services") for m in methods[first_pod:])  # Services before Pods
    events = [r.data for r in list(kmock) if r.method == "POST" and "/events" in str(r.url)]
    assert sorted(e["reason"] for e in events) == ["JobCreated", "SuccessfulCreate"]  # one per reconcile
    assert [e["message"] for e in events if e["reason"] == "SuccessfulCreate"] == [
        "Created networkpolicy pj-replicas, configmap pj-cluster, 3 services (pj-ps-0, pj-worker-0, pj-worker-1) "
        "and 3 pods (pj-ps-0, pj-worker-0, pj-worker-1)"
    ]
    assert all(e["metadata"]["name"].startswith("pj.") for e in events)  # named here: no generateName
    assert events[0]["involvedObject"] == {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": "pj",
        "namespace": "ns",
        "uid": job["metadata"]["uid"],
    }
    # The same plan again (an operator that restarted before seeing its own writes): no duplicates.
    again = await asyncio.to_thread(client.execute, job, plan, NOW)
    assert again.created == {}


async def test_marker_goes_onto_the_pod_before_the_status(client, kmock):
    kmock.objects["v1/pods", "ns", "pj-worker-1"] = {"metadata": {"name": "pj-worker-1", "namespace": "ns"}}
    kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"] = make_job()
    plan = reconcile.Plan(
        actions=[reconcile.MarkCounted("pj-worker-1", 1), reconcile.WriteStatus({"restarts": 1})], status={}
    )
    await asyncio.to_thread(client.execute, make_job(), plan, NOW)
    patches = [str(r.url) for r in list(kmock) if r.method == "PATCH"]
    assert patches[0].endswith("/pods/pj-worker-1") and patches[1].endswith("/status")
    annotations = kmock.objects["v1/pods", "ns", "pj-worker-1"]["metadata"]["annotations"]
    assert annotations == {podview.ANNOTATION_COUNTED: "1"}


async def test_api_errors_carry_the_servers_message(client, kmock):
    kmock["post /api/v1/namespaces/ns/pods"] << Forbidden
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    with pytest.raises(kube.ApiError, match="HTTP 403: pods is forbidden"):
        await asyncio.to_thread(client.create, pod)


def test_connection_info_for_kopf_uses_the_same_credentials(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://10.0.0.1:6443', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    info = kube.Kube.connect(kubeconfig=str(config)).connection_info()
    assert info["server"] == "https://10.0.0.1:6443"
    assert (info["scheme"], info["token"]) == ("Bearer", "abc")
    assert info["insecure"] is True


@attrs.frozen
class QuotaExceeded(kmock.KubernetesError):
    status: int = 403
    reason: str = "Forbidden"
    message: str = 'pods "pj-worker-1" is forbidden: exceeded quota: q'


async def test_refused_creates_are_returned_and_the_rest_of_the_plan_still_runs(client, kmock):
    job = make_job()
    kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"] = job
    kmock["post /api/v1/namespaces/ns/pods", kmock.data({"metadata": {"name": "pj-worker-1"}})] << QuotaExceeded
    plan = reconcile.plan(job, [], now=NOW)
    outcome = await asyncio.to_thread(client.execute, job, plan, NOW)
    assert outcome.refused == [
        reconcile.Refusal("Pod", "pj-worker-1", 403, 'pods "pj-worker-1" is forbidden: exceeded quota: q')
    ]
    assert outcome.created["Pod"] == 2 and outcome.created["Service"] == 3  # the others were created


@attrs.frozen
class InternalError(kmock.KubernetesError):
    status: int = 500
    reason: str = "InternalError"
    message: str = "etcdserver: request timed out"


async def test_other_api_errors_still_raise(client, kmock):
    kmock["post /api/v1/namespaces/ns/pods"] << InternalError
    job = make_job()
    kmock.objects["agents.dev/v1alpha1/agentsjobs", "ns", "pj"] = job
    with pytest.raises(kube.PlanInterrupted, match="HTTP 500") as stopped:
        await asyncio.to_thread(client.execute, job, reconcile.plan(job, [], now=NOW), NOW)
    assert isinstance(stopped.value.cause, kube.ApiError) and stopped.value.cause.status == 500
    assert stopped.value.executed.created["Service"] == 3  # done before the error, not to be done twice


def test_a_long_list_of_children_is_cut_short_in_an_event():
    names = [f"job-worker-{i}" for i in range(999)]
    message = f"Created {kube._listing({'Service': names, 'Pod': names})}"
    assert message.startswith("Created 999 services (job-worker-0, job-worker-1,") and len(message) < 1024
    assert " and 999 pods (job-worker-0," in message and message.endswith(" more)")
