"""Async workers on real pods: a deleted worker pod is recreated and rejoins, a deleted ps pod comes back and
training resumes from the chief's checkpoint on the job's volume, and the job still succeeds."""

from __future__ import annotations

from agents_operator.trainer import checkpoints
from tests.node.node import CLAIM, until

TOTAL_STEPS = 4_000_000


def _job(name: str) -> dict:
    return {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": name},
        "spec": {
            # The preset's settings, which train Pendulum at thousands of steps per second here: a budget that
            # lasts past both deletions and the recoveries.
            "trainer": {
                "preset": "pendulum",
                "mode": "async",
                "totalSteps": TOTAL_STEPS,
                "evalEvery": 0,
                "evalEpisodes": 2,
                "videoEpisodes": 0,
                "checkpointEvery": 10,
            },
            "replicaSpecs": {
                "ps": {"replicas": 1, "restartPolicy": "Always"},
                "worker": {"replicas": 2, "restartPolicy": "ExitCode"},
            },
            "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
            "runPolicy": {"backoffLimit": 4, "cleanPodPolicy": "None"},
        },
    }


def _uid(ns, pod: str) -> str | None:
    return ns.pod(pod).get("metadata", {}).get("uid")


def test_deleted_worker_and_ps_pods_come_back_and_the_async_job_succeeds(namespace, tmp_path):
    ns = namespace
    run = ns.provide_volume(tmp_path / "volume") / "recovery"
    ns.apply(_job("recovery"))
    ns.wait_running("recovery", 3)
    until(lambda: len(checkpoints.list_checkpoints(run)) >= 2, 300, "two checkpoints")

    worker, ps = "recovery-worker-1", "recovery-ps-0"
    before = _uid(ns, worker)
    ns.kubectl("delete", "pod", worker, "--wait=false")
    until(lambda: _uid(ns, worker) not in (None, before), 120, "a new worker pod")
    ns.wait_running("recovery", 3)
    until(lambda: "worker 1 serving at" in ns.kubectl("logs", worker), 180, "the new worker to serve")

    seen = checkpoints.list_checkpoints(run)[-1]
    before = _uid(ns, ps)
    ns.kubectl("delete", "pod", ps, "--wait=false")
    until(lambda: _uid(ns, ps) not in (None, before), 120, "a new ps pod")
    chief = "recovery-worker-0"
    until(lambda: ns.kubectl("logs", chief).count("initialising them") >= 2, 300, "the chief to restore")
    # the restore is said once it is done, a while after it began (seconds on a loaded node)
    until(lambda: "resumed from" in ns.kubectl("logs", chief), 120, "the chief to say it restored")
    # Only the newest checkpoints are kept: wait for a newer one, not for more of them.
    until(lambda: checkpoints.list_checkpoints(run)[-1] != seen, 300, "a checkpoint after the ps came back")

    status = ns.wait_state("recovery", "Succeeded", 600)
    assert status["restarts"] == 0, status  # deleted pods are replaced, not failures
    ps_log = ns.kubectl("logs", ps)
    # The new worker 1 trained to the end, and rejoined the ps restarted after it (its slot taken again), so the
    # chief waited for it rather than for nobody, and the ps exited at the chief's word.
    assert "done: " in ns.kubectl("logs", worker), ns.kubectl("logs", worker)[-2000:]
    assert "gave up waiting" not in ns.kubectl("logs", chief)
    assert "the chief finished the job, after every other worker: ps 0 exits" in ps_log, ps_log[-2000:]
    assert status["progress"]["envSteps"] >= TOTAL_STEPS * 0.9, status  # the last read precedes the end
