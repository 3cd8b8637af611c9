"""Workers that join and leave a running job: the real trainer's processes (1 ps and workers, each with its
TF_CONFIG, as the operator renders an elastic job's: every worker slot listed, not every slot taken)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents_operator import tfconfig
from agents_operator.local.processes import free_port
from agents_operator.trainer import reporting, rundir

SETTINGS = {
    "total_steps": 60_000,  # the chief alone takes over 100 s: worker 2 starts (TensorFlow's import) well before
    "envs_per_worker": 2,
    "envs_per_process": 2,
    "rollout_steps": 128,
    "epochs": 2,
    "minibatches": 4,
    "eval_every": 0,
    "checkpoint_every": 50,
    "video_episodes": 0,
    "export": False,
    "mode": "async",
    "metrics_port": 0,
}


def start(
    cluster: dict, task_type: str, index: int, logdir: Path, out: Path, settings: dict = SETTINGS
) -> subprocess.Popen:
    env = {**os.environ, tfconfig.ENV_VAR: tfconfig.TFConfig(cluster, task_type, index).to_json()}
    env[tfconfig.BIND_HOST_VAR] = "127.0.0.1"
    sets = [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
    command = [sys.executable, "-m", "agents_operator.cli", "train", "--config", "pendulum", *sets]
    log = (out / f"{task_type}-{index}.log").open("w")
    # --resume as every rendered replica: the run directory is the job's, whoever comes first
    command += ["--logdir", str(logdir), "--resume"]
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for_line(proc: subprocess.Popen, path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        said = path.read_text()[-2000:]
        assert proc.poll() is None and time.monotonic() < deadline, f"{path.name} never said {text!r}: {said}"
        time.sleep(0.2)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_worker_joins_a_running_job_and_leaves_it_on_sigterm_and_the_job_finishes(tmp_path, mode):
    """Three worker slots, the chief's alone taken at the start: worker 2 joins once the job trains (slot 1 stays
    empty), pulls the shared weights and trains; SIGTERM (a scale back down) makes it end its iteration, give
    its slot back and exit 143; the chief waits for nobody, the shared counters reach total_steps, the ps
    exits by itself. In sync mode (no backup worker) each step waits for the workers there: the chief's alone,
    then both, then the chief's alone again (worker 2's wake-up: the step in progress waits for it no more)."""
    ports = [free_port() for _ in range(4)]
    cluster = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}
    logdir, out, settings = tmp_path / "run", tmp_path, {**SETTINGS, "mode": mode}
    procs = {name: start(cluster, *name, logdir, out, settings) for name in [("ps", 0), ("worker", 0)]}
    try:
        wait_for_line(procs["worker", 0], out / "worker-0.log", " steps  return", 240)
        procs["worker", 2] = start(cluster, "worker", 2, logdir, out, settings)
        # a progress line comes after an iteration of its own: pushed into the shared weights and counters
        wait_for_line(procs["worker", 2], out / "worker-2.log", " steps  return", 240)
        procs["worker", 2].send_signal(signal.SIGTERM)
        assert procs["worker", 2].wait(120) == reporting.STOPPED
        for name in [("worker", 0), ("ps", 0)]:
            assert procs[name].wait(300) == 0, (out / f"{name[0]}-{name[1]}.log").read_text()[-3000:]
    finally:
        for proc in procs.values():
            proc.kill()
    joined = (out / "worker-2.log").read_text()
    assert "SIGTERM: leaving the job after iteration" in joined
    assert "initialising them" not in joined  # it joined the live state
    chief = (out / "worker-0.log").read_text()
    assert "gave up waiting" not in chief  # nobody waited for the empty slot or the worker that left
    assert "the chief finished the job" in (out / "ps-0.log").read_text()
    summary = rundir.load_summary(logdir)
    assert summary["env_steps"] >= SETTINGS["total_steps"]
