"""Learning benchmark: the return a preset reaches against environment steps; prints one JSON line.

Trains one preset in this process with the real trainer (`loop.train`), evaluating the deterministic
policy every `--eval-every` iterations, and reports the evaluation curve, whether and when the goal was
reached, and the final return. Throughput: end to end (`steps_per_s`, updates included), the sampling
phase during training, and before training, in alternating rounds on the same environment batch, raw
random-action stepping against the trainer's sampling phase (`sampling_vs_raw`; goal 0.85).

Goals (issue 3): Pendulum-v1 mean return >= -250 within 300k steps; InvertedPendulumBullet >= 950
within 150k steps.

    .venv/bin/python benchmarks/bench_learning_curve.py --task pendulum
    .venv/bin/python benchmarks/bench_learning_curve.py --task inverted_pendulum --steps 150000 --seed 1
"""

from __future__ import annotations

import os

# Small matrices only: threaded BLAS would compete with the environment processes for the cores.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from agents_operator import presets  # noqa: E402
from agents_operator.trainer import commands, loop  # noqa: E402
from agents_operator.trainer.outputs import RunResult  # noqa: E402

GOALS = {"pendulum": (-250.0, 300_000), "inverted_pendulum": (950.0, 150_000)}


def sampling_throughput(config, rounds: int, seconds: float) -> tuple[float, float]:
    """Best-of-`rounds` steps/s of the environment batch with random actions (raw) and of the trainer's
    sampling phase (numpy actor, wrappers, GAE) on the same batch, measured in alternating rounds so that
    both see the same load on a shared machine."""
    from agents_operator.trainer.envs.batch import BatchEnv
    from agents_operator.trainer.learner import Learner, vector_size
    from agents_operator.trainer.sampling.samplers import Sampler
    from agents_operator.trainer.sampling.training_env import TrainingEnv

    with BatchEnv(
        config.env_id, config.envs_per_worker, envs_per_process=config.envs_per_process, seed=config.seed
    ) as env:
        learner = Learner(config, vector_size(env.observation_shape), vector_size(env.action_shape))
        policy = learner.initialize().policy
        learner.close()
        rng = np.random.default_rng(0)
        sampler = Sampler(TrainingEnv(env, config), config, rng)
        shape = (env.num_envs, *env.action_shape)
        raw = sampling = 0.0
        for _ in range(rounds):
            steps, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                env.step(rng.uniform(env.action_low, env.action_high, shape).astype(np.float32))
                steps += env.num_envs
            raw = max(raw, steps / (time.perf_counter() - started))
            steps, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                batch, _, _ = sampler.collect(policy)
                steps += len(batch)
            sampling = max(sampling, steps / (time.perf_counter() - started))
        return raw, sampling


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pendulum", choices=presets.names(), help="preset (default pendulum)")
    parser.add_argument("--steps", type=int, help="environment steps (default: the goal's budget or the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations (default 5)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds (default 3)")
    parser.add_argument("--round-seconds", type=float, default=3.0, help="seconds per throughput round")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--logdir", type=Path, help="keep the run here (default: a temporary directory)")
    return parser


def curve_record(result: RunResult, goal: float | None, budget: int | None, batch_size: int) -> dict:
    """What the evaluations say against the goal: its curve, the first step at the goal, the final return."""
    curve = [[steps, round(value, 1)] for steps, value in result.evaluations]
    reached = next((steps for steps, value in result.evaluations if goal is not None and value >= goal), None)
    final = curve[-1][1] if curve else None
    within_budget = budget is not None and result.env_steps < budget + batch_size
    return {
        "env_steps": result.env_steps,
        "goal_return": goal,
        "goal_steps": budget,
        "first_step_at_goal": reached,
        "final_eval_return": final,
        "best_eval_return": max(value for _, value in curve) if curve else None,
        "goal_met": goal is not None and final is not None and final >= goal and within_budget,
        "eval_curve": curve,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    goal, budget = GOALS.get(args.task, (None, None))
    settings = {
        "seed": args.seed,
        "eval_every": args.eval_every,
        "eval_episodes": args.eval_episodes,
        "metrics_port": 0,
        **({"total_steps": args.steps or budget} if args.steps or budget else {}),
        **commands.parse_overrides(args.overrides),
    }
    config = presets.resolve(args.task, settings)

    raw, sampling = sampling_throughput(config, args.rounds, args.round_seconds)
    with tempfile.TemporaryDirectory() as scratch:
        result = loop.train(config, args.logdir or Path(scratch) / "run")
    record = {
        "task": args.task,
        "env_id": config.env_id,
        "seed": args.seed,
        **curve_record(result, goal, budget, config.batch_size),
        "wall_s": round(result.wall_seconds, 1),
        "steps_per_s": round(result.env_steps / result.wall_seconds),
        "train_sampling_steps_per_s": round(result.sampling_steps / result.sampling_seconds),
        "raw_env_steps_per_s": round(raw),
        "sampling_steps_per_s": round(sampling),
        "sampling_vs_raw": round(sampling / raw, 3),
    }
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
