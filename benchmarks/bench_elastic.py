"""A scale event in a running job: env steps/s before, during and after it, and the seconds from the request to
the added worker's first push.

An async elastic Pendulum job (1 ps, 1 worker, up to 2) runs here through `agents-operator local`; once it has
trained for `--phase` seconds, `agents-operator scale`'s request adds worker 1, and after another phase takes
it away again (SIGTERM: it ends its iteration, pushes it and leaves). The job's rate is the growth of the
shared env-step counter (the chief's summaries) over each phase, the one-worker phases being the baseline of
the same run. Prints one JSON line.

    python benchmarks/bench_elastic.py [--phase 40] [--logdir DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from agents_operator.local import scaling
from agents_operator.trainer import rundir

TRAINER = {"preset": "pendulum", "mode": "async", "totalSteps": 5_000_000, "evalEvery": 0, "videoEpisodes": 0}
"""Long enough never to end by itself: the benchmark stops it."""
PROGRESS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO .* steps  return")
"""A trainer's progress line (the first comes after its first iteration's push), with its log timestamp."""


def elastic_job() -> dict:
    return {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "elastic"},
        "spec": {
            "trainer": TRAINER,
            "elastic": {"minWorkers": 1, "maxWorkers": 2},
            "replicaSpecs": {"ps": {}, "worker": {"replicas": 1}},
        },
    }


def first_push(log: Path, after: float) -> float | None:
    """When (epoch seconds) the trainer of `log` first said its progress after `after`, or None yet."""
    if not log.exists():
        return None
    for line in log.read_text().splitlines():
        if match := PROGRESS.match(line):
            when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if when >= after:
                return when
    return None


def rate(points: list[tuple[float, int]], begin: float, end: float) -> float | None:
    """Env steps per second of the shared counter between `begin` and `end` (wall times), from (wall, env
    steps) points: the growth between the first and the last point inside the window."""
    inside = [(t, steps) for t, steps in points if begin <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def counter_points(logdir: Path) -> list[tuple[float, int]]:
    """(wall time, shared env steps) of every chief summary (each iteration writes one, at the env steps)."""
    import tensorflow as tf

    points = set()
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            if any(v.tag == "perf/env_steps_per_second" for v in event.summary.value):
                points.add((event.wall_time, event.step))
    return sorted(points)


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_elastic: timed out waiting for {what}")
        time.sleep(0.2)
    return value


def measure(logdir: Path, phase: float) -> dict:
    """The phases, run by `agents-operator local` in a process of its own as a user runs it (stopped with
    SIGINT at the end), scaled with `agents-operator scale`'s request."""
    logdir.mkdir(parents=True, exist_ok=True)
    manifest = logdir.parent / "elastic.yaml"
    manifest.write_text(json.dumps(elastic_job()))
    command = [sys.executable, "-m", "agents_operator.cli", "local", str(manifest), "--logdir", str(logdir)]
    launcher = subprocess.Popen([*command, "--no-video"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = logdir / rundir.LOGS
    try:
        started = wait(lambda: first_push(logs / "elastic-worker-0.log", 0), 300, "the chief's first push")
        time.sleep(phase)
        asked = time.time()
        scaling.request(logdir, 2)
        joined = wait(lambda: first_push(logs / "elastic-worker-1.log", asked), 300, "worker 1's first push")
        time.sleep(phase)
        removed = time.time()
        scaling.request(logdir, 1)
        said = "SIGTERM: leaving the job after iteration"
        wait(lambda: said in (logs / "elastic-worker-1.log").read_text(), 120, "worker 1 to leave")
        left = time.time()
        time.sleep(phase)
        ended = time.time()
    finally:
        launcher.send_signal(signal.SIGINT)
        launcher.wait(60)
    points = counter_points(logdir)
    before, during, after = rate(points, started, asked), rate(points, joined, removed), rate(points, left, ended)
    return {
        "benchmark": "elastic",
        "phase_seconds": phase,
        "env_steps_per_s_1_worker_before": _round(before),
        "env_steps_per_s_2_workers": _round(during),
        "env_steps_per_s_1_worker_after": _round(after),
        "ratio_2_workers_to_before": round(during / before, 3) if before and during else None,
        "seconds_scale_to_first_push": round(joined - asked, 1),
        "seconds_scale_down_to_left": round(left - removed, 1),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=float, default=40.0, help="seconds of each phase (default 40)")
    parser.add_argument("--logdir", type=Path, help="run directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(measure(args.logdir or Path(tmp) / "run", args.phase)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
