"""Crash consistency at scale: 300 jobs created at once, the operator SIGKILLed twice while it creates their
children. In the end every job has exactly its children, each owned by it, none twice and none orphaned, and
every job reaches Running once its pods run.

Its file sorts last in the suite: deleting its namespace (2,100 children) goes on in the background after it.
"""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents_operator import api, kube, naming, render
from tests.e2e.cluster import Cluster, jobs_path, manifest, wait_for

pytestmark = pytest.mark.timeout(600)

JOBS = 300
CLIENTS = 16
"""Concurrent requests of the test (creating jobs, playing the kubelet)."""


def expected_children(name: str) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in render.children(api.parse_job(manifest(name)))}


KINDS = ("Pod", "Service", "NetworkPolicy", "ConfigMap")
ROOT_CA = "kube-root-ca.crt"
"""The ConfigMap the API server's controller manager puts in every namespace: not a child."""


def children(cluster: Cluster) -> list[dict]:
    """Every Pod, Service, NetworkPolicy and ConfigMap in the namespace (labelled ours or not), but ROOT_CA."""
    return [
        {**obj, "kind": kind}
        for kind in KINDS
        for obj in cluster.kube.list(kind, cluster.ns)
        if (kind, obj["metadata"]["name"]) != ("ConfigMap", ROOT_CA)
    ]


def count(cluster: Cluster) -> int:
    """How many children there are, without listing them (a list of the first and the count of the rest)."""
    total = 0
    for kind in KINDS:
        listing = cluster.kube.request("GET", kube.path(kind, cluster.ns), query={"limit": 1})
        total += len(listing["items"]) + (listing["metadata"].get("remainingItemCount") or 0)
        if kind == "ConfigMap" and cluster.kube.get(kind, cluster.ns, ROOT_CA) is not None:
            total -= 1
    return total


def test_300_jobs_with_the_operator_killed_twice_while_creating(cluster, operator):
    names = [f"crash-{i:03d}" for i in range(JOBS)]
    expected = {child for name in names for child in expected_children(name)}
    pods = sorted(name for kind, name in expected if kind == "Pod")
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(lambda n: cluster.kube.request("POST", jobs_path(cluster.ns), body=manifest(n)), names))
        for share in (0.25, 0.6):
            wait_for(lambda share=share: count(cluster) >= share * len(expected), 120, f"{share:.0%} children")
            operator.kill()
            operator.start()
        wait_for(lambda: count(cluster) >= len(expected), 300, "every child")
        jobs = {j["metadata"]["name"]: j for j in cluster.kube.request("GET", jobs_path(cluster.ns))["items"]}
        found = children(cluster)
        assert Counter((c["kind"], c["metadata"]["name"]) for c in found) == Counter(expected)  # none missing or extra
        for child in found:
            (owner,) = child["metadata"]["ownerReferences"]
            job = jobs[child["metadata"]["labels"][naming.LABEL_JOB]]
            assert owner["uid"] == job["metadata"]["uid"], child["metadata"]["name"]  # no orphan, no stranger
        list(pool.map(lambda pod: cluster.set_phase(pod, "Running"), pods))
    wait_for(lambda: _states(cluster) == {"Running": JOBS}, 300, f"{JOBS} jobs Running")
    assert all(j["status"]["restarts"] == 0 for j in cluster.kube.request("GET", jobs_path(cluster.ns))["items"])
    announced = Counter(name for e in cluster.events("SuccessfulCreate") for name in _created(e["message"]))
    assert announced and max(announced.values()) == 1  # no child was created twice


def _states(cluster: Cluster) -> Counter:
    return Counter(
        (j.get("status") or {}).get("state") for j in cluster.kube.request("GET", jobs_path(cluster.ns))["items"]
    )


def _created(message: str) -> list[str]:
    """The children a SuccessfulCreate Event names, as Kind/name: 'Created pod a', 'Created networkpolicy n,
    3 services (a, b, c) and 3 pods (a, b, c)'."""
    kinds = {word: kind for kind, (_, _, plural) in kube.RESOURCES.items() for word in (kind.lower(), plural)}
    out = []
    for word, single, names in re.findall(
        r"(\w+) (?:([\w.-]+)(?=,| and |$)|\(([^)]*)\))", message.removeprefix("Created ")
    ):
        out += [f"{kinds[word]}/{n}" for n in ([single] if single else names.split(", "))]
    return out
