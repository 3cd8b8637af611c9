"""Shared by the distributed benchmarks: run a local AgentsJob and read its rates from the summaries."""

from __future__ import annotations

import os
from pathlib import Path

from agents_operator import local
from agents_operator.api import parse_job
from agents_operator.reconcile.rules import Outcome


def run_job(preset: str, trainer: dict, workers: int, logdir: Path) -> Outcome:
    """1 ps and `workers` workers of `preset` with `trainer` overrides, run here until they finish."""
    job = parse_job(
        {
            "apiVersion": "agents.dev/v1alpha1",
            "kind": "AgentsJob",
            "metadata": {"name": "bench"},
            "spec": {
                "trainer": {"preset": preset, **trainer},
                "replicaSpecs": {"ps": {}, "worker": {"replicas": workers}},
                "successPolicy": "AllWorkers",
            },
        }
    )
    with open(os.devnull, "w") as quiet:
        return local.Launcher(job, logdir, out=quiet).run()


def job_rates(logdir: Path, batch: int) -> dict:
    """Rates from the chief's summaries between its first and last iteration (start-up excluded).

    `batch` is one worker's transitions per iteration: with the chief's per-iteration rates it gives the
    seconds the chief spent sampling and updating.
    """
    import tensorflow as tf

    rows: dict[float, dict] = {}
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                rows.setdefault(event.wall_time, {"step": event.step})[value.tag] = value.simple_value
    iterations = [(wall, row) for wall, row in sorted(rows.items()) if "perf/env_steps_per_second" in row]
    (t0, first), (t1, last) = iterations[0], iterations[-1]
    measured = [row for _, row in iterations[1:]]

    def mean(values):
        return sum(values) / len(values)

    iteration = mean([batch / row["perf/env_steps_per_second"] for row in measured])
    sampling = mean([batch / row["perf/sampling_steps_per_second"] for row in measured])
    return {
        "env_steps_per_s": round((last["step"] - first["step"]) / (t1 - t0), 1),
        "iteration_seconds": round(iteration, 4),
        "sampling_seconds": round(sampling, 4),
        "update_seconds": round(iteration - sampling, 4),
        "ps_share": round(mean([row["perf/ps_share"] for row in measured]), 4),
        "iterations_measured": len(measured),
    }
