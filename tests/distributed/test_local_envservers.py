"""AgentsJobs with env servers, run here by the local launcher with the real trainer and env servers.

The same manifests an operator would reconcile: the launcher starts the sidecars and the remote env-server
pods as processes on local ports and tells each worker its own through AGENTS_ENV_SERVERS, as render does.
"""

import threading

from agents_operator import contract, local
from agents_operator.api import parse_job
from agents_operator.trainer import summaries

from .test_local_job import log, wait_until

SMALL = {
    "preset": "pendulum",
    "envsPerWorker": 4,
    "rolloutSteps": 128,
    "epochs": 2,
    "minibatches": 4,
    "evalEpisodes": 2,
}


def job(name: str, spec: dict) -> local.Launcher:
    return parse_job(
        {"apiVersion": "agents.dev/v1alpha1", "kind": "AgentsJob", "metadata": {"name": name}, "spec": spec}
    )


def test_a_sidecar_killed_mid_run_is_restarted_and_its_worker_carries_on(tmp_path):
    spec = {
        "trainer": {**SMALL, "mode": "sync", "totalSteps": 24_000, "evalEvery": 0, "checkpointEvery": 8},
        "replicaSpecs": {"ps": {}, "worker": {"replicas": 2}},
        "environments": {"placement": "sidecar", "mode": "step"},
        "runPolicy": {"backoffLimit": 0},  # a sidecar restart is the kubelet's business, not a job restart
    }
    launcher = local.Launcher(job("side", spec), tmp_path)
    assert [r.name for r in launcher.replicas] == [
        "ps-0",
        "worker-0/env-server",
        "worker-0",
        "worker-1/env-server",
        "worker-1",
    ]
    sidecar = launcher.replicas[3]
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", launcher.run()))
    thread.start()
    try:
        wait_until(lambda: (launcher.tracker.last or {}).get(contract.METRIC_ENV_STEPS, 0) >= 4_000, 300, "progress")
        sidecar.process.kill()
    finally:
        thread.join(timeout=600)
    assert outcome["value"].succeeded, outcome["value"]
    assert launcher.restarts == 0 and sidecar.attempts == 2
    worker = log(tmp_path, "worker-1", "side")
    assert "reconnecting" in worker and "episodes in flight there were discarded" in worker
    assert launcher.tracker.last[contract.METRIC_ENV_STEPS] >= 24_000
    assert (tmp_path / "logs" / "side-worker-1.env-server.log").read_text().count("serving 4 x Pendulum-v1") == 2


def test_remote_env_servers_in_rollout_mode_serve_a_worker_and_the_evaluator(tmp_path):
    spec = {
        "trainer": {**SMALL, "totalSteps": 12_000, "evalEvery": 4, "checkpointEvery": 4, "videoEpisodes": 1},
        "replicaSpecs": {"worker": {"replicas": 1}, "evaluator": {}},
        "storage": {"persistentVolumeClaim": {"claimName": "runs"}},
        "successPolicy": "AllWorkers",
        "environments": {"placement": "remote", "mode": "rollout", "serversPerWorker": 2},
    }
    launcher = local.Launcher(job("far", spec), tmp_path)
    names = [r.name for r in launcher.replicas]
    assert names == ["envserver-0", "envserver-1", "envserver-2", "worker-0", "evaluator-0"]
    evaluator = launcher.replicas[-1]
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("value", launcher.run()))
    thread.start()
    try:
        wait_until(lambda: evaluator.exit_code is not None or outcome, 400, "the evaluator or the job to end")
    finally:
        thread.join(timeout=300)
    assert outcome["value"].succeeded, outcome["value"]
    assert summaries.read_scalars(tmp_path, "eval/mean_return"), log(tmp_path, "worker-0", "far")
    assert summaries.read_scalars(tmp_path / "evaluator", "eval/mean_return"), log(tmp_path, "evaluator-0", "far")
    assert (tmp_path / "videos" / "final.gif").stat().st_size > 0
    for i, envs in enumerate((2, 2, 1)):
        assert f"serving {envs} x Pendulum-v1" in log(tmp_path, f"envserver-{i}", "far")
