"""Elastic jobs on a real API server: the CRD's scale subresource (`kubectl scale`, an HPA), its bounds refused
by the server naming the field, and the chart's operator adding and removing worker pods as the count changes."""

from __future__ import annotations

import json

import pytest

from agents_operator import naming
from agents_operator.kube import ApiError
from tests.e2e.cluster import Cluster, jobs_path, manifest, wait_for

pytestmark = pytest.mark.timeout(300)

BOUNDS = {"minWorkers": 1, "maxWorkers": 4}


def scale_path(namespace: str, name: str = "pj") -> str:
    return f"{jobs_path(namespace)}/{name}/scale"


def put_scale(kube, namespace: str, replicas: int) -> dict:
    scale = kube.request("GET", scale_path(namespace))
    scale["spec"]["replicas"] = replicas
    return kube.request("PUT", scale_path(namespace), body=scale)


def refusal(err: ApiError) -> tuple[list[str], str]:
    body = json.loads(err.body)
    return [c.get("field", "") for c in (body.get("details") or {}).get("causes") or []], body.get("message", "")


@pytest.fixture
def no_operator(chart_operator) -> None:
    """No operator writes to the jobs of this test (the next test that needs one starts it again)."""
    chart_operator.stop()


def test_kubectl_scale_sets_an_elastic_jobs_workers_and_the_server_refuses_a_scale_past_its_bounds(
    kube, namespace, kubectl, no_operator
):
    kube.request("POST", jobs_path(namespace), body=manifest(workers=2, elastic=BOUNDS))
    kubectl("scale", "agentsjob/pj", "--replicas=3", "-n", namespace)
    assert Cluster(kube, namespace).job()["spec"]["replicaSpecs"]["worker"]["replicas"] == 3
    assert kube.request("GET", scale_path(namespace))["spec"]["replicas"] == 3
    for replicas, field, said in [
        (5, "spec.replicaSpecs.worker.replicas", "must lie within elastic.minWorkers and elastic.maxWorkers"),
        (0, "spec.replicaSpecs.worker.replicas", "should be greater than or equal to 1"),
    ]:
        with pytest.raises(ApiError) as err:
            put_scale(kube, namespace, replicas)
        fields, message = refusal(err.value)
        assert err.value.status == 422 and field in fields, (fields, message)
        assert said in message, message
    assert Cluster(kube, namespace).job()["spec"]["replicaSpecs"]["worker"]["replicas"] == 3


def test_a_job_that_is_not_elastic_refuses_a_scale(kube, namespace, no_operator):
    kube.request("POST", jobs_path(namespace), body=manifest(workers=2))
    with pytest.raises(ApiError) as err:
        put_scale(kube, namespace, 3)
    fields, message = refusal(err.value)
    assert err.value.status == 422 and "spec.replicaSpecs" in fields, (fields, message)
    assert "replica counts are immutable" in message


def test_an_hpa_targets_an_elastic_job_through_its_scale_subresource(kube, namespace, operator):
    cluster = Cluster(kube, namespace)
    cluster.create_job(workers=1, elastic=BOUNDS)
    selector = wait_for(lambda: cluster.status().get("workerSelector"), 60, "the worker selector in status")
    assert kube.request("GET", scale_path(namespace))["status"]["selector"] == selector
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "pj"},
        "spec": {
            "scaleTargetRef": {"apiVersion": naming.API_VERSION, "kind": naming.KIND, "name": "pj"},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}],
        },
    }
    hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] = 80
    path = f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers"
    stored = kube.request("POST", path, body=hpa)  # the test control plane runs no HPA controller to act on it
    assert stored["spec"]["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]
    # what an HPA controller reads: the scale subresource, its replicas and the pods' selector
    scale = kube.request("GET", scale_path(namespace))
    assert scale["spec"]["replicas"] == 1 and scale["status"]["selector"] == selector
    selected = lambda: [  # noqa: E731
        p["metadata"]["name"]
        for p in kube.request("GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector})["items"]
    ]
    wait_for(lambda: selected() == ["pj-worker-0"], 60, "the selector to select the worker pod, and only it")


def test_the_operator_adds_and_removes_workers_as_the_scale_changes(kube, namespace, kubectl, operator):
    cluster = Cluster(kube, namespace)
    cluster.started(workers=1, elastic=BOUNDS)
    first = {name: pod["metadata"]["uid"] for name, pod in cluster.pods().items()}
    kubectl("scale", "agentsjob/pj", "--replicas=3", "-n", namespace)
    wait_for(lambda: {"pj-worker-1", "pj-worker-2"} <= cluster.live_pods(), 60, "two workers added")
    wait_for(lambda: {"pj-worker-1", "pj-worker-2"} <= cluster.services(), 60, "their Services")
    assert {name: cluster.pods()[name]["metadata"]["uid"] for name in first} == first  # no other pod restarted
    wait_for(lambda: cluster.status().get("workers") == 3, 60, "status.workers 3")
    wait_for(lambda: any("workers 1 -> 3" in e["message"] for e in cluster.events("Scaled")), 60, "the Event")
    cluster.run_all()
    kubectl("scale", "agentsjob/pj", "--replicas=2", "-n", namespace)
    wait_for(lambda: "pj-worker-2" not in cluster.live_pods(), 60, "the highest worker removed")
    wait_for(lambda: any("workers 3 -> 2" in e["message"] for e in cluster.events("Scaled")), 60, "the Event")
    assert {"pj-ps-0", "pj-worker-0", "pj-worker-1"} <= cluster.live_pods()
    assert cluster.state() == "Running" and (cluster.status().get("restarts") or 0) == 0
