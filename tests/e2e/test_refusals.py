"""Refusals are loud: when the API server's admission refuses a job's child, the job says so at once.

Built-in admission needs no webhook, so a bare API server refuses for real: a ResourceQuota of `pods: 0` (403)
and a ValidatingAdmissionPolicy (422). The job gets condition ReplicaFailure with the API server's message
and a Warning Event naming the child in the same reconcile, the operator retries with a growing delay, and
the job goes on once the obstacle is gone.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest

from agents_operator.kube import ApiError
from tests.e2e.cluster import Cluster, wait_for

pytestmark = pytest.mark.timeout(300)

QUOTA = "no-pods"
POLICY_MESSAGE = "images must come from registry.internal"
ALL_PODS = {"pj-ps-0", "pj-worker-0", "pj-worker-1"}
# The operator writes the job's status before it posts the plan's Events (kube.Client.execute), so a test that
# sees the condition waits for the Events.


def refusal(cluster: Cluster, name: str = "pj") -> dict | None:
    conditions = cluster.status(name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "ReplicaFailure" and c["status"] == "True"), None)


def refused_pods(cluster: Cluster) -> set[str]:
    """Pods named by the job's FailedCreate Warning Events."""
    return {
        m.group(1)
        for e in cluster.events("FailedCreate")
        for m in [re.match(r"Error creating pod (\S+):", e["message"])]
        if m
    }


def retry_delays(log: str, namespace: str) -> list[float]:
    return [float(d) for d in re.findall(rf"reconcile of {namespace}/pj failed \(retry in ([\d.]+) s\)", log)]


def test_a_quota_that_refuses_pods_is_reported_retried_with_backoff_and_lifted(cluster, operator):
    quotas = f"/api/v1/namespaces/{cluster.ns}/resourcequotas"
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": QUOTA}, "spec": {"hard": {"pods": "0"}}}
    cluster.kube.request("POST", quotas, body=quota)
    # What the resource-quota controller would report (the bare control plane runs none; on a cluster it does).
    usage = {"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}
    cluster.kube.request("PATCH", f"{quotas}/{QUOTA}/status", body=usage, content_type="application/merge-patch+json")
    cluster.create_job()
    condition = wait_for(lambda: refusal(cluster), 30, "ReplicaFailure")
    assert condition["reason"] == "FailedCreate" and "exceeded quota: no-pods" in condition["message"]
    assert cluster.state() == "ReplicaFailure"
    wait_for(lambda: refused_pods(cluster) == ALL_PODS, 10, "a FailedCreate Event per pod")
    assert cluster.services() == ALL_PODS  # the quota is on pods only
    time.sleep(6)
    delays = retry_delays(operator.log.read_text(), cluster.ns)
    assert 2 <= len(delays) <= 4 and delays == sorted(delays) and delays[-1] >= 2 * delays[0], delays
    assert len(cluster.events("FailedCreate")) == 3  # the same refusal is not announced again on every retry
    cluster.kube.request("DELETE", f"{quotas}/{QUOTA}")
    wait_for(lambda: len(cluster.live_pods()) == 3, 90, "pods created once the quota is gone")
    wait_for(lambda: refusal(cluster) is None and cluster.state() == "Created", 30, "the refusal cleared")
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running")


@pytest.fixture
def policy(cluster) -> Iterator[str]:
    """A ValidatingAdmissionPolicy for the test's namespace: pod images only from registry.internal."""
    name = f"agents-e2e-{uuid.uuid4().hex[:8]}"
    base = "/apis/admissionregistration.k8s.io/v1"
    cluster.kube.request(
        "POST",
        f"{base}/validatingadmissionpolicies",
        body={
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {
                        "expression": "object.spec.containers.all(c, c.image.startsWith('registry.internal/'))",
                        "message": POLICY_MESSAGE,
                        "reason": "Invalid",
                    }
                ],
            },
        },
    )
    cluster.kube.request(
        "POST",
        f"{base}/validatingadmissionpolicybindings",
        body={
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.ns}}},
            },
        },
    )
    yield name
    cluster.kube.request("DELETE", f"{base}/validatingadmissionpolicybindings/{name}")
    cluster.kube.request("DELETE", f"{base}/validatingadmissionpolicies/{name}")


def _policy_in_force(cluster: Cluster) -> bool:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    try:
        cluster.kube.request("POST", f"/api/v1/namespaces/{cluster.ns}/pods", body=pod, query={"dryRun": "All"})
    except ApiError as err:
        return POLICY_MESSAGE in err.message
    return False


def test_an_admission_policy_that_refuses_pods_is_reported(cluster, policy):
    wait_for(lambda: _policy_in_force(cluster), 30, "the policy in force")
    cluster.create_job()
    condition = wait_for(lambda: refusal(cluster), 30, "ReplicaFailure")
    assert POLICY_MESSAGE in condition["message"] and policy in condition["message"]
    wait_for(lambda: refused_pods(cluster) == ALL_PODS, 10, "a FailedCreate Event per pod")
    assert all(POLICY_MESSAGE in e["message"] and e["type"] == "Warning" for e in cluster.events("FailedCreate"))
