"""Scaling benchmark: a local AgentsJob with 1 and then 2 workers (1 ps each); prints one JSON line.

Each job runs the real trainer through the local launcher, every worker with the same batch and the same
number of iterations, so two workers take twice the environment steps of one. Throughput is measured
from the chief's summaries between its first and last iteration (TensorFlow start-up excluded): job env
steps per second, seconds per iteration, and the share of each update spent with the ps
(`perf/ps_share`). The figure of merit is `speedup` = 2-worker rate / 1-worker rate (goal >= 1.8 when each
worker has its own core). Each job's processes' CPU seconds (this process's waited-for descendants, start-up
included) over its wall seconds give `cores_busy`: where one worker already keeps the usable cores busy, a
second one on the same cores can only share them, and `speedup` is bounded by usable_cpus / cores_busy.
`--envs N` gives each worker N environments in one process; without it each worker has the preset's own
layout (its envs_per_worker, spread as its envs_per_process says: by default one process per usable CPU).

Then the measured inputs feed the scaling model of docs/scaling.md: bytes moved per update (from the
parameter count), the ps round-trip time, and the time of a worker's iteration, to predict throughput and
efficiency for 4 to 64 workers on separate machines.

    .venv/bin/python benchmarks/bench_worker_scaling.py                         # Pendulum, 20 iterations per worker
    .venv/bin/python benchmarks/bench_worker_scaling.py --preset cheetah --iterations 6 --envs 4
    .venv/bin/python benchmarks/bench_worker_scaling.py --preset hopper --iterations 12  # the preset's layout
    .venv/bin/python benchmarks/bench_worker_scaling.py --async-updates concurrent       # updates that overlap
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.make import usable_cpus

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_job_runs import job_rates, run_job  # benchmarks/, also when imported from the tests


def predict(
    iteration_seconds: float,
    ps_seconds: float,
    parameters: int,
    workers: int,
    ps_tasks: int,
    turn_seconds: float | None = None,
) -> dict:
    """Predicted speedup over one worker for `workers` workers on machines of their own.

    Concurrent async workers never wait for each other: each adds its throughput until the parameter servers
    saturate. Per iteration a worker costs the ps tasks one pull and one push of the weights (2 x 4 bytes x
    parameters), served in at least the measured ps round-trip time or the transfer time at 10 Gbit/s,
    whichever is longer; `ps_tasks` servers share that work (variables are sharded round-robin). So the
    ps tasks can serve at most ps_tasks x iteration_seconds / service workers at full speed. Async workers
    that update in turn (`turn_seconds`: an update's seconds, pull to push) hold the one turn for that long
    per iteration, so at most iteration_seconds / turn_seconds of them run at full speed. Sync mode also
    waits for the slowest worker of each iteration, which this model leaves out.
    """
    bandwidth = 10e9 / 8
    service = max(ps_seconds, 2 * 4 * parameters / bandwidth)
    capacity = ps_tasks * iteration_seconds / service
    if turn_seconds is not None:
        capacity = min(capacity, iteration_seconds / turn_seconds)
    speedup = min(workers, capacity)
    return {"workers": workers, "ps": ps_tasks, "speedup": round(speedup, 1), "efficiency": round(speedup / workers, 3)}


def parameter_count(config) -> int:
    def mlp(sizes):
        return sum(a * b + b for a, b in itertools.pairwise(sizes))

    obs, act = 17, 6  # HalfCheetahBullet's sizes as a representative locomotion task
    return mlp([obs, *config.policy_layers, act]) + act + mlp([obs, *config.value_layers, 1])


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_job(preset: str, overrides: dict, workers: int, logdir: Path, batch: int) -> dict:
    """`run_job` with its rates (`job_rates`) and what its processes cost: CPU and wall seconds, cores busy."""
    cpu, started = children_cpu_seconds(), time.monotonic()
    outcome = run_job(preset, overrides, workers, logdir)
    wall, cpu = time.monotonic() - started, children_cpu_seconds() - cpu
    if not outcome.succeeded:
        raise RuntimeError(f"{workers} worker(s): {outcome.message}")
    costs = {"cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "cores_busy": round(cpu / wall, 2)}
    return {**job_rates(logdir, batch), **costs}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum")
    parser.add_argument("--iterations", type=int, default=20, help="iterations per worker")
    parser.add_argument(
        "--envs", type=int, default=None, help="environments per worker, in one process (default: the preset's layout)"
    )
    parser.add_argument("--mode", default="async", choices=["sync", "async"])
    parser.add_argument(
        "--async-updates",
        default=TrainerConfig.model_fields["async_updates"].default,
        choices=["in_turn", "concurrent"],
        help="in async mode: the workers' updates in turn or concurrent (the trainer's asyncUpdates)",
    )
    return parser


def figures(args: argparse.Namespace, config: TrainerConfig, one: dict, two: dict) -> dict:
    """The JSON line: both jobs, their ratios and the model's predictions for larger clusters."""
    parameters = parameter_count(config)
    ps_seconds = one["ps_share"] * one["update_seconds"]
    in_turn = args.mode == "async" and args.async_updates == "in_turn"
    turn_seconds = one["update_seconds"] if in_turn else None
    return {
        "benchmark": "scaling",
        "preset": args.preset,
        "mode": args.mode,
        "async_updates": args.async_updates if args.mode == "async" else None,
        "envs_per_worker": config.envs_per_worker,
        "envs_per_process": config.envs_per_process,
        "usable_cpus": usable_cpus(),
        "one_worker": one,
        "two_workers": two,
        "speedup": round(two["env_steps_per_s"] / one["env_steps_per_s"], 3),
        "goal_speedup": 1.8,
        "cpu_per_env_step_ratio": round(
            (two["cpu_seconds"] / (2 * args.iterations)) / (one["cpu_seconds"] / args.iterations), 3
        ),
        "model_inputs": {
            "parameters": parameters,
            "bytes_per_update": 2 * 4 * parameters,
            "iteration_seconds": one["iteration_seconds"],
            "ps_seconds": round(ps_seconds, 4),
            "turn_seconds": turn_seconds,
        },
        "predicted": [
            predict(one["iteration_seconds"], ps_seconds, parameters, workers, ps_tasks, turn_seconds)
            for workers in (4, 8, 16, 32, 64)
            for ps_tasks in (1, 2, 4)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    layout = {} if args.envs is None else {"envsPerWorker": args.envs, "envsPerProcess": args.envs}
    config = presets.resolve(args.preset, layout)
    results = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as logdir:
            overrides = {
                **layout,
                "mode": args.mode,
                **({"asyncUpdates": args.async_updates} if args.mode == "async" else {}),
                "totalSteps": args.iterations * workers * config.batch_size,
                "evalEvery": 0,
                "checkpointEvery": 1_000_000,
                "videoEpisodes": 0,
            }
            try:
                results[workers] = timed_job(args.preset, overrides, workers, Path(logdir), config.batch_size)
            except RuntimeError as error:
                print(json.dumps({"error": str(error)}))
                return 1
    print(json.dumps(figures(args, config, results[1], results[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
