"""Restricted by default, judged by the API server's own PodSecurity admission (built in: no webhook needed).

The job's namespace enforces Pod Security "restricted". A job whose template has an init container and an
extra container, with an env-server sidecar and a TensorBoard, gets every pod created by the operator (and
TensorBoard's by the ReplicaSet controller) admitted; what the render before "restricted by default" made of
the init container is refused. A Privileged job fails without a pod where the operator does not allow it.
"""

from __future__ import annotations

import copy
import json

import pytest

from agents_operator import naming
from agents_operator.kube import ApiError
from tests.e2e.cluster import NOWHERE, Cluster, manifest, wait_for

pytestmark = pytest.mark.timeout(300)

ENFORCE = "pod-security.kubernetes.io/enforce"
TEMPLATE = {
    "spec": {
        "nodeSelector": NOWHERE,
        "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
        "containers": [{"name": "agents"}, {"name": "logs", "image": "busybox", "command": ["sleep", "inf"]}],
    }
}


@pytest.fixture
def restricted(cluster) -> Cluster:
    """The test's namespace, enforcing Pod Security "restricted"."""
    patch = {"metadata": {"labels": {ENFORCE: "restricted", f"{ENFORCE}-version": "latest"}}}
    cluster.kube.request(
        "PATCH", f"/api/v1/namespaces/{cluster.ns}", body=patch, content_type="application/merge-patch+json"
    )
    return cluster


def _job(pod_security: str = "Restricted") -> dict:
    job = manifest("pj", tensorboard=True, environments={"placement": "sidecar"})
    for replica in job["spec"]["replicaSpecs"].values():
        replica["template"] = copy.deepcopy(TEMPLATE)
    job["spec"]["podSecurity"] = pod_security
    return job


def _create(cluster: Cluster, job: dict) -> None:
    cluster.kube.request("POST", f"/apis/{naming.API_VERSION}/namespaces/{cluster.ns}/{naming.PLURAL}", body=job)


def _tensorboard_pods(cluster: Cluster) -> list[dict]:
    return cluster.kube.list("Pod", cluster.ns, {naming.LABEL_COMPONENT: "tensorboard"})


def test_every_pod_of_a_job_with_init_and_extra_containers_is_admitted(restricted, operator):
    _create(restricted, _job())
    expected = {"pj-ps-0", "pj-worker-0", "pj-worker-1"}
    wait_for(lambda: restricted.live_pods() >= expected, 60, "every replica's pod admitted")
    assert not any(c["type"] == "ReplicaFailure" for c in restricted.status().get("conditions") or [])
    for pod in restricted.pods().values():
        spec = pod["spec"]
        if pod["metadata"]["labels"].get(naming.LABEL_TYPE) == naming.WORKER:
            assert [c["name"] for c in spec["initContainers"]] == ["fetch", "env-server"]
            assert [c["name"] for c in spec["containers"]] == ["agents", "logs"]
        assert spec["automountServiceAccountToken"] is False
        assert not any(v["name"].startswith("kube-api-access") for v in spec.get("volumes", []))
    (tensorboard,) = wait_for(lambda: _tensorboard_pods(restricted), 60, "TensorBoard's pod admitted")
    assert tensorboard["spec"]["automountServiceAccountToken"] is False


def test_the_init_container_as_the_old_render_left_it_is_refused(restricted, operator):
    """Before, only the main and extra containers got security defaults: the same pod with its init
    container's stripped is what the API server was sent, and it refuses it."""
    _create(restricted, _job())
    wait_for(lambda: "pj-worker-1" in restricted.live_pods(), 60, "pj-worker-1")
    pod = restricted.pods()["pj-worker-1"]
    old = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "old-render"}, "spec": copy.deepcopy(pod["spec"])}
    del old["spec"]["initContainers"][0]["securityContext"]
    with pytest.raises(ApiError) as refused:
        restricted.kube.request("POST", f"/api/v1/namespaces/{restricted.ns}/pods", body=old, query={"dryRun": "All"})
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'violates PodSecurity "restricted:latest"' in message
    assert 'container "fetch" must set securityContext.allowPrivilegeEscalation=false' in message


def test_a_privileged_job_fails_without_pods_where_the_operator_does_not_allow_it(restricted, operator):
    job = _job("Privileged")
    job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["hostNetwork"] = True
    _create(restricted, job)  # the CRD lets Privileged jobs escalate; the operator decides
    wait_for(lambda: restricted.state() == "Failed", 30, "Failed")
    failed = next(c for c in restricted.status()["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PrivilegedNotAllowed" and failed["message"].startswith("spec.podSecurity")
    assert restricted.pods() == {} and restricted.services() == set()
