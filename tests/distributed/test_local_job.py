"""Whole AgentsJobs run here by the local launcher: 1 ps + 2 workers of the real trainer.

They take tens of seconds each (TensorFlow starts in every replica), which is the point: the ps exits by
itself, a killed worker or ps is restarted and the job carries on from the chief's checkpoint, and two
synchronous workers learn.
"""

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from agents_operator import contract, local
from agents_operator.api import parse_job
from agents_operator.trainer import checkpoints, loop, summaries


def make_job(name: str, mode: str, trainer: dict) -> local.Launcher:
    return parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": name},
            "spec": {
                "trainer": {"preset": "pendulum", "mode": mode, **trainer},
                "replicaSpecs": {
                    "ps": {"replicas": 1, "restartPolicy": "Always"},
                    "worker": {"replicas": 2, "restartPolicy": "ExitCode"},
                },
                "runPolicy": {"backoffLimit": 4},
            },
        }
    )


def log(logdir: Path, replica: str, name: str) -> str:
    path = logdir / "logs" / f"{name}-{replica}.log"
    return path.read_text() if path.exists() else ""


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_ps_and_a_killed_worker_are_restarted_and_the_job_finishes(tmp_path):
    job = make_job(
        "faults",
        "sync",
        {
            "totalSteps": 200_000,  # lasts past the kill and the restore even when the trainer runs fast
            "envsPerWorker": 2,
            "envsPerProcess": 2,
            "rolloutSteps": 128,
            "epochs": 2,
            "minibatches": 4,
            "evalEvery": 0,
            "checkpointEvery": 4,
        },
    )
    launcher = local.Launcher(job, tmp_path)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", launcher.run()))
    thread.start()
    try:
        ps, _, worker1 = launcher.replicas
        wait_until(lambda: len(checkpoints.list_checkpoints(tmp_path)) >= 2, 240, "two checkpoints")
        # The sync chief steps alone until worker 1 has joined, and a worker that connects only once the ps is
        # back (still importing TensorFlow, on a loaded machine) has nothing to reconnect: kill the ps once
        # worker 1 has trained.
        wait_until(lambda: "steps  return" in log(tmp_path, "worker-1", "faults"), 240, "worker 1 to train")
        ps.process.kill()
        wait_until(lambda: "resumed from" in log(tmp_path, "worker-0", "faults"), 240, "the chief to restore")
        # Only the newest three checkpoints are kept: wait for a newer one, not for more of them.
        seen = checkpoints.list_checkpoints(tmp_path)[-1]
        wait_until(lambda: checkpoints.list_checkpoints(tmp_path)[-1] != seen, 240, "a checkpoint after recovery")
        worker1.process.kill()
    finally:
        thread.join(timeout=600)
    result = outcome["value"]
    assert result.succeeded, result
    assert launcher.restarts == 2
    assert ps.attempts == 2 and worker1.attempts == 2
    chief = log(tmp_path, "worker-0", "faults")
    assert "initialising them" in chief  # twice: at the start, then for the restarted ps
    assert "lost a parameter server" in log(tmp_path, "worker-1", "faults")
    assert "the chief finished the job, after every other worker: ps 0 exits" in log(tmp_path, "ps-0", "faults")
    assert ps.exit_code == 0  # the ps left by itself, before the launcher would stop it
    # the restarted worker rejoined: it waited for the live variables and trained on
    assert log(tmp_path, "worker-1", "faults").count("start, attempt") == 2
    # Sync workers stop at the same update; a restore may roll the step counter back by a batch or so.
    assert launcher.tracker.last[contract.METRIC_ENV_STEPS] >= 199_000


@pytest.mark.parametrize(
    ("mode", "overlap", "updates"),
    [("sync", False, None), ("async", True, None), ("async", False, "concurrent")],
    ids=["synchronous", "asynchronous-in-turn-overlap-asked", "asynchronous-concurrent"],
)
def test_two_workers_learn_pendulum(tmp_path, mode, overlap, updates):
    """Sync workers; async workers asked to overlap, which sample serially and say so, and update in turn (the
    default); async workers whose updates overlap."""
    trainer = {"totalSteps": 100_000, "evalEvery": 4, "checkpointEvery": 8, "overlap": overlap}
    job = make_job("learn", mode, {**trainer, **({"asyncUpdates": updates} if updates else {})})
    launcher = local.Launcher(job, tmp_path)
    outcome = launcher.run()
    assert outcome.succeeded, outcome
    evals = summaries.read_scalars(tmp_path, "eval/mean_return")
    train = summaries.read_scalars(tmp_path, "train/mean_return")
    first, last = np.mean([v for _, v in train[:3]]), np.mean([v for _, v in evals[-2:]])
    # A random policy scores about -1200 on Pendulum-v1; this is a policy that swings up and holds.
    assert first < -900, train[:3]
    assert last > -500, evals
    assert "the chief finished the job, after every other worker: ps 0 exits" in log(tmp_path, "ps-0", "learn")
    staleness = [value for _, value in summaries.read_scalars(tmp_path, "async/staleness")]
    waits = [value for _, value in summaries.read_scalars(tmp_path, "async/turn_wait_seconds")]
    if mode == "sync":
        assert staleness == waits == []
    elif updates == "concurrent":  # the other worker pushes between the chief's pulls and pushes
        assert len(staleness) == len(train) and min(staleness) >= 0, staleness
        assert max(staleness) >= 1, staleness
        assert waits == []
    else:  # in turn: no push comes between a pull and its push (concurrent, some do: the case above)
        assert len(staleness) == len(train) and set(staleness) == {0.0}, staleness
        assert len(waits) == len(train), waits
        assert all(loop.ASYNC_SERIAL in log(tmp_path, f"worker-{i}", "learn") for i in (0, 1))


def test_the_evaluator_scores_the_chiefs_checkpoints(tmp_path):
    job = parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "evals"},
            "spec": {
                "trainer": {
                    "preset": "pendulum",
                    "totalSteps": 80_000,  # outlasts the evaluator's start even when the trainer runs fast
                    "envsPerWorker": 2,
                    "envsPerProcess": 2,
                    "rolloutSteps": 256,
                    "minibatches": 4,
                    "epochs": 2,
                    "evalEvery": 0,
                    "evalEpisodes": 2,
                    "checkpointEvery": 2,
                },
                "replicaSpecs": {"ps": {}, "worker": {"replicas": 1}, "evaluator": {}},
                "storage": {"persistentVolumeClaim": {"claimName": "runs"}},
                "successPolicy": "AllWorkers",
            },
        }
    )
    launcher = local.Launcher(job, tmp_path)
    evaluator = launcher.replicas[-1]
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", launcher.run()))
    thread.start()
    try:
        wait_until(lambda: evaluator.exit_code is not None or outcome, 300, "the evaluator or the job to end")
    finally:
        thread.join(timeout=300)
    assert outcome["value"].succeeded
    scored = summaries.read_scalars(tmp_path / "evaluator", "eval/mean_return")
    assert scored, log(tmp_path, "evaluator-0", "evals")
    assert all(-2000 < value <= 0 for _, value in scored)  # Pendulum returns are negative
    assert "evaluator: ckpt-" in log(tmp_path, "evaluator-0", "evals")
