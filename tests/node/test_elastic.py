"""An elastic job on real pods: `kubectl scale` while it trains adds workers that join the live state and removes
the highest one, which leaves on SIGTERM; nothing else restarts and the job succeeds with a learned return."""

from __future__ import annotations

from agents_operator.trainer import rundir
from tests.node.node import CLAIM, Namespace, example, until
from tests.node.test_pendulum import PENDULUM_GOAL

TRAINING_SECONDS = 900
ELASTIC_STEPS = 450_000
"""The preset's 300k, and half again: up to three async workers push changes computed on weights their peers have
moved since; at 300k one run of this job ended at -266.9 (the goal is -250), two others above it."""


def _elastic_pendulum() -> dict:
    """examples/pendulum.yaml as an async elastic job of one worker at first (up to three), each worker asking
    for less CPU so that three fit on the 2-core node beside the ps and the operator's pods."""
    job = example("pendulum.yaml")
    job["metadata"]["name"] = "elastic"
    job["spec"]["trainer"] = {"preset": "pendulum", "mode": "async", "totalSteps": ELASTIC_STEPS}
    job["spec"]["elastic"] = {"minWorkers": 1, "maxWorkers": 3}
    job["spec"]["replicaSpecs"]["worker"]["replicas"] = 1
    job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "300m"
    job["spec"]["storage"] = {"persistentVolumeClaim": {"claimName": CLAIM}}
    return job


def _trained(ns: Namespace, pod: str) -> bool:
    """Whether the worker of `pod` has pushed an iteration (its first progress line comes after one)."""
    return " steps  return" in ns.kubectl("logs", pod, "-c", "agents")


def test_an_async_pendulum_job_scaled_1_3_2_while_it_trains_succeeds_with_a_learned_return(namespace, tmp_path):
    ns = namespace
    volume = ns.provide_volume(tmp_path / "volume")
    ns.apply(_elastic_pendulum())
    first = ns.wait_running("elastic", 2)
    uids = {name: pod["metadata"]["uid"] for name, pod in first.items()}
    until(lambda: _trained(ns, "elastic-worker-0"), 300, "the chief's first iteration")

    ns.kubectl("scale", "agentsjob/elastic", "--replicas=3")
    ns.wait_running("elastic", 4)
    until(lambda: _trained(ns, "elastic-worker-2"), 300, "worker 2's first iteration")
    assert ns.status("elastic").get("workers") == 3

    ns.kubectl("scale", "agentsjob/elastic", "--replicas=2")
    last: dict = {}

    def left() -> bool:
        pod = ns.pods("elastic").get("elastic-worker-2")
        if pod is None:
            return True
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            if container["name"] == "agents" and "terminated" in (container.get("state") or {}):
                # Its last lines are in the termination message (FallbackToLogsOnError: it exits 143), read with
                # the status; `kubectl logs` races the kubelet removing the pod's log files.
                last.update(container["state"]["terminated"])
        return False

    until(left, 120, "worker 2 to leave", every=0.5)
    status = ns.wait_state("elastic", "Succeeded", TRAINING_SECONDS)

    if last:  # seen between its exit and its pod's removal
        assert last["exitCode"] == 143 and "SIGTERM: leaving the job after iteration" in last["message"], last
    assert status["restarts"] == 0 and status["workers"] == 2, status
    pods = ns.pods("elastic")
    assert all(pods[name]["metadata"]["uid"] == uid for name, uid in uids.items() if name in pods), "a pod restarted"
    scaled = [e.get("message") for e in ns.events("elastic") if e.get("reason") == "Scaled"]
    assert any("workers 1 -> 3" in m for m in scaled) and any("workers 3 -> 2" in m for m in scaled), scaled
    summary = rundir.load_summary(volume / "elastic")
    assert summary and summary["env_steps"] >= ELASTIC_STEPS and summary["eval_mean_return"] >= PENDULUM_GOAL, summary
