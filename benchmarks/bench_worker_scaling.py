"""Scaling benchmark: a local AgentsJob with 1 and then 2 workers (1 ps each); prints one JSON line.

Each job runs the real trainer through the local launcher, every worker with the same batch and the same
number of iterations, so two workers take twice the environment steps of one. Throughput is measured
from the chief's summaries between its first and last iteration (TensorFlow start-up excluded): job env
steps per second, seconds per iteration, and the share of each update spent with the ps
(`perf/ps_share`). The figure of merit is `speedup` = 2-worker rate / 1-worker rate (goal >= 1.8 when each
worker has its own core).

Then the measured inputs feed the scaling model of docs/scaling.md: bytes moved per update (from the
parameter count), the ps round-trip time, and the time of a worker's iteration, to predict throughput and
efficiency for 4 to 64 workers on separate machines.

    .venv/bin/python benchmarks/bench_worker_scaling.py                         # Pendulum, 20 iterations per worker
    .venv/bin/python benchmarks/bench_worker_scaling.py --preset cheetah --iterations 6 --envs 4
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

from local_job_runs import job_rates, run_job

from agents_operator import presets


def predict(iteration_seconds: float, ps_seconds: float, parameters: int, workers: int, ps_tasks: int) -> dict:
    """Predicted speedup over one worker for `workers` workers on machines of their own.

    Workers never wait for each other in async mode: each adds its throughput until the parameter servers
    saturate. Per iteration a worker costs the ps tasks one pull and one push of the weights (2 x 4 bytes x
    parameters), served in at least the measured ps round-trip time or the transfer time at 10 Gbit/s,
    whichever is longer; `ps_tasks` servers share that work (variables are sharded round-robin). So the
    ps tasks can serve at most ps_tasks x iteration_seconds / service workers at full speed. Sync mode
    also waits for the slowest worker of each iteration, which this model leaves out.
    """
    bandwidth = 10e9 / 8
    service = max(ps_seconds, 2 * 4 * parameters / bandwidth)
    capacity = ps_tasks * iteration_seconds / service
    speedup = min(workers, capacity)
    return {"workers": workers, "ps": ps_tasks, "speedup": round(speedup, 1), "efficiency": round(speedup / workers, 3)}


def parameter_count(config) -> int:
    def mlp(sizes):
        return sum(a * b + b for a, b in itertools.pairwise(sizes))

    obs, act = 17, 6  # HalfCheetahBullet's sizes as a representative locomotion task
    return mlp([obs, *config.policy_layers, act]) + act + mlp([obs, *config.value_layers, 1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum")
    parser.add_argument("--iterations", type=int, default=20, help="iterations per worker")
    parser.add_argument("--envs", type=int, default=8, help="environments per worker")
    parser.add_argument("--mode", default="async", choices=["sync", "async"])
    args = parser.parse_args(argv)
    config = presets.resolve(args.preset, {"envs_per_worker": args.envs, "envs_per_process": args.envs})
    results = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as logdir:
            overrides = {
                "envsPerWorker": args.envs,
                "envsPerProcess": args.envs,
                "mode": args.mode,
                "totalSteps": args.iterations * workers * config.batch_size,
                "evalEvery": 0,
                "checkpointEvery": 1_000_000,
            }
            outcome = run_job(args.preset, overrides, workers, Path(logdir))
            if not outcome.succeeded:
                print(json.dumps({"error": f"{workers} worker(s): {outcome.message}"}))
                return 1
            results[workers] = job_rates(Path(logdir), config.batch_size)
    one, two = results[1], results[2]
    parameters = parameter_count(config)
    ps_seconds = one["ps_share"] * one["update_seconds"]
    figures = {
        "benchmark": "scaling",
        "preset": args.preset,
        "mode": args.mode,
        "envs_per_worker": args.envs,
        "one_worker": one,
        "two_workers": two,
        "speedup": round(two["env_steps_per_s"] / one["env_steps_per_s"], 3),
        "goal_speedup": 1.8,
        "model_inputs": {
            "parameters": parameters,
            "bytes_per_update": 2 * 4 * parameters,
            "iteration_seconds": one["iteration_seconds"],
            "ps_seconds": round(ps_seconds, 4),
        },
        "predicted": [
            predict(one["iteration_seconds"], ps_seconds, parameters, workers, ps_tasks)
            for workers in (4, 8, 16, 32, 64)
            for ps_tasks in (1, 2, 4)
        ],
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
