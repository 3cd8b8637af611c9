"""Environments outside the trainer on real pods: env-server sidecars, and env-server pods reached by their DNS
names (placement remote), each job to `Succeeded`."""

from __future__ import annotations

import re

from tests.node.node import example, until

SHORT = {"totalSteps": 16384, "videoEpisodes": 0, "evalEpisodes": 2}
"""A few iterations: enough to cross the gRPC hop both ways many times, far less than the preset's budget."""


def _done(chief_log: str) -> int:
    """The env steps of the chief's last line ("done: N env steps, M iterations")."""
    found = re.findall(r"done: (\d+) env steps", chief_log)
    assert found, chief_log[-2000:]
    return int(found[-1])


def test_the_sidecar_example_succeeds(namespace):
    ns = namespace
    job = example("pendulum-sidecar.yaml")
    job["spec"]["trainer"].update(SHORT)
    ns.apply(job)
    name = job["metadata"]["name"]
    pods = ns.wait_running(name, 3)
    containers = {c["name"] for c in pods[f"{name}-worker-0"]["spec"]["containers"]}
    init = {c["name"] for c in pods[f"{name}-worker-0"]["spec"].get("initContainers") or []}
    assert "env-server" in containers | init, (containers, init)
    ns.wait_state(name, "Succeeded", 600)
    assert _done(ns.kubectl("logs", f"{name}-worker-0", "-c", "agents")) >= SHORT["totalSteps"]


def test_a_remote_placement_reaches_its_env_servers_by_dns_and_succeeds(namespace):
    ns = namespace
    job = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "remote"},
        "spec": {
            "trainer": {"preset": "pendulum", "mode": "sync", **SHORT},
            "replicaSpecs": {
                "ps": {"replicas": 1, "restartPolicy": "Always"},
                "worker": {"replicas": 2, "restartPolicy": "ExitCode"},
            },
            "environments": {"placement": "remote", "serversPerWorker": 1, "mode": "rollout"},
            "runPolicy": {"backoffLimit": 3},
        },
    }
    ns.apply(job)
    pods = ns.wait_running("remote", 5)
    servers = {"remote-envserver-0", "remote-envserver-1"}
    assert servers <= set(pods), sorted(pods)
    for server in servers:
        assert "env-server: serving" in ns.kubectl("logs", server)
    ns.wait_state("remote", "Succeeded", 600)
    assert _done(ns.kubectl("logs", "remote-worker-0")) >= SHORT["totalSteps"]
    # Env servers never exit by themselves: the operator deletes them with the job's end.
    until(lambda: not servers & set(ns.pods("remote")), 120, "the env servers deleted")
