"""cleanPodPolicy and ttlSecondsAfterFinished with real pods terminating: nothing left behind that the policy
removes, nothing removed that it keeps."""

from __future__ import annotations

import pytest

from tests.node.node import until
from tests.node.test_failures import job


@pytest.mark.parametrize(
    ("policy", "kept"),
    [
        ("All", set()),
        # Finished pods stay, with their logs; the ps exits by itself at the end, so it may be one of them.
        ("Running", {"cleanup-worker-0", "cleanup-worker-1"}),
        ("None", {"cleanup-ps-0", "cleanup-worker-0", "cleanup-worker-1"}),
    ],
)
def test_clean_pod_policy_on_real_pods(namespace, policy, kept):
    ns = namespace
    manifest = job("cleanup")
    manifest["spec"]["runPolicy"]["cleanPodPolicy"] = policy
    ns.apply(manifest)
    ns.wait_running("cleanup", 3)
    ns.wait_state("cleanup", "Succeeded", 600)

    def left() -> set[str]:
        pods = ns.pods("cleanup")
        finished_ps = {n for n, p in pods.items() if "-ps-" in n and p["status"].get("phase") == "Succeeded"}
        return set(pods) - (finished_ps if policy == "Running" else set())

    until(lambda: left() == kept, 120, f"pods {sorted(kept)}: {sorted(ns.pods('cleanup'))}")
    assert not [n for n, p in ns.pods("cleanup").items() if p["status"].get("phase") in ("Pending", "Running")]
    services = {s["metadata"]["name"] for s in ns.kube.list("Service", ns.ns, {"agents.dev/job-name": "cleanup"})}
    assert bool(services) == (policy == "None"), services
    for pod in kept:
        assert ns.kubectl("logs", pod), pod


def test_a_finished_job_is_deleted_after_its_ttl_with_every_pod(namespace):
    ns = namespace
    manifest = job("ttl")
    manifest["spec"]["runPolicy"].update({"ttlSecondsAfterFinished": 10, "cleanPodPolicy": "None"})
    ns.apply(manifest)
    ns.wait_state("ttl", "Succeeded", 600)
    assert ns.pods("ttl"), "cleanPodPolicy None keeps the pods until the TTL"
    until(lambda: not ns.job("ttl"), 60, "the job deleted after its TTL")
    until(lambda: not ns.pods("ttl"), 120, "its pods garbage-collected")
