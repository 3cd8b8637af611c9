"""Sync training with one worker 2x slower, without and with a backup worker; one JSON line.

Runs 1 ps and 3 sync workers of the Pendulum preset as the real trainer's processes (each with its TF_CONFIG, on
localhost), twice: `backup_workers` 0, then 1. Worker 2 is made 2x slower for the whole run: its process and its
environment processes are stopped and continued in turns of `--slice` seconds each (SIGSTOP, SIGCONT), as a
machine of half the speed would run it. Over `--seconds` once every worker trains, the chief's Prometheus
metrics give the job's updates per second (the global step) and env steps per second (every worker's, the
dropped ones too); `speedup` is the updates per second with the backup worker over those without.

    .venv/bin/python benchmarks/bench_backup_workers.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agents_operator import scrape, tfconfig
from agents_operator.local.processes import free_port

WORKERS = 3
SETTINGS = {
    "total_steps": 100_000_000,  # stopped after the measurement, never reached
    "envs_per_worker": 4,
    "envs_per_process": 4,
    "eval_every": 0,
    "checkpoint_every": 1_000_000,
    "video_episodes": 0,
    "export": False,
    "mode": "sync",
}


def start(cluster: dict, task: str, index: int, logdir: Path, settings: dict) -> subprocess.Popen:
    env = {**os.environ, tfconfig.ENV_VAR: tfconfig.TFConfig(cluster, task, index).to_json()}
    env[tfconfig.BIND_HOST_VAR] = "127.0.0.1"
    sets = [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
    command = [sys.executable, "-m", "agents_operator.cli", "train", "--config", "pendulum", *sets, "--logdir"]
    log = (logdir.parent / f"{task}-{index}.log").open("w")
    return subprocess.Popen([*command, str(logdir), "--resume"], env=env, stdout=log, stderr=subprocess.STDOUT)


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (a worker and its environment processes)."""
    out = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        out += tree(int(child))
    return out


def throttle(pid: int, seconds: float, done: threading.Event) -> None:
    """Half speed: the process tree stopped for `seconds`, run for `seconds`, until `done`."""
    while not done.is_set():
        pids = tree(pid)
        for p in pids:
            os.kill(p, signal.SIGSTOP)
        time.sleep(seconds)
        for p in pids:
            os.kill(p, signal.SIGCONT)
        time.sleep(seconds)


def counters(url: str) -> tuple[float, float] | None:
    metrics = scrape.scrape(url)
    if not metrics or "agents_trainer_global_step" not in metrics:
        return None
    return metrics["agents_trainer_global_step"], metrics["agents_trainer_env_steps"]


def measure(backups: int, seconds: float, slice_seconds: float, root: Path) -> dict:
    ports = [free_port() for _ in range(WORKERS + 2)]
    cluster = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1 : WORKERS + 1]]}
    url = f"http://127.0.0.1:{ports[-1]}/metrics"
    settings = {**SETTINGS, "backup_workers": backups, "metrics_port": ports[-1]}
    logdir = root / f"backups-{backups}" / "run"
    logdir.parent.mkdir(parents=True)
    names = [("ps", 0), *(("worker", i) for i in range(WORKERS))]
    procs = {name: start(cluster, *name, logdir, settings) for name in names}
    done = threading.Event()
    try:
        while (first := counters(url)) is None or first[0] < 5:  # every worker in (the first steps need all)
            time.sleep(0.5)
        slow = threading.Thread(target=throttle, args=(procs["worker", WORKERS - 1].pid, slice_seconds, done))
        slow.start()
        begin, start_counts = time.monotonic(), counters(url)
        time.sleep(seconds)
        end_counts, elapsed = counters(url), time.monotonic() - begin
    finally:
        done.set()
        for proc in procs.values():
            proc.kill()
    chief = (logdir.parent / "worker-0.log").read_text()
    dropped = [line for line in chief.splitlines() if "dropped the late change" in line]
    return {
        "updates_per_s": round((end_counts[0] - start_counts[0]) / elapsed, 2),
        "env_steps_per_s": round((end_counts[1] - start_counts[1]) / elapsed),
        "dropped_changes": int(dropped[-1].rsplit("(", 1)[1].split()[0]) if dropped else 0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="measured seconds per run")
    parser.add_argument("--slice", type=float, default=0.05, help="seconds stopped, then running, for worker 2")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        runs = {b: measure(b, args.seconds, args.slice, Path(root)) for b in (0, 1)}
    report = {
        "benchmark": "backup_workers",
        "workers": WORKERS,
        "slow_worker": "2x slower (stopped half the time)",
        "without_backup": runs[0],
        "with_backup": runs[1],
        "speedup": round(runs[1]["updates_per_s"] / runs[0]["updates_per_s"], 2),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
