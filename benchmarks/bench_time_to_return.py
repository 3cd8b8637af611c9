"""Wall time to the rl-baselines3-zoo return: this trainer against SB3 PPO with the zoo's settings; one JSON line.

For each task (`--tasks`: the `cheetah`, `hopper` and `walker` presets) and each setting (`--settings`: `ours`, the
trainer's preset; `sb3_zoo`, SB3 PPO with rl-baselines3-zoo's hyperparameters, as `bench_sb3_compare.py` runs it),
trains up to `--max-steps` env steps (default 2M, the zoo's budget for these tasks), evaluating the policy
every `--eval-every` env steps the same way on both sides: the trainer's evaluation, `eval_episodes` (the
preset's) episodes of the deterministic policy with the trainer's evaluation seeds. Reported per run: the
first evaluation whose mean return reaches the target (`--target`, default the zoo's published PPO return:
HalfCheetahBulletEnv-v0 2925, HopperBulletEnv-v0 2575, Walker2DBulletEnv-v0 2110, from rl-baselines3-zoo's
benchmark.md), its env steps (`at_env_steps`) and the training minutes before it (start-up included, time
spent evaluating excluded), or that none did; every evaluation as [env steps, mean return, training seconds];
and per task the ratio of the minutes (SB3 / ours: above 1, ours reached it sooner). SB3 stops at the target;
the trainer runs its whole budget (its later evaluations show whether the return holds).

SB3 runs in the venv that `bench_sb3_compare.py --setup` creates. The runs are long (the zoo trains 2M steps; SB3
ran at 400-600 env steps/s on the 2-core build machine), so run them on a quiet machine, one at a time:

    .venv/bin/python benchmarks/bench_time_to_return.py --tasks hopper --settings ours
    .venv/bin/python benchmarks/bench_time_to_return.py --tasks cheetah hopper walker --settings ours sb3_zoo
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.trainer import loop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sb3_compare  # benchmarks/, also when imported from the tests
from bench_learning_table import REFERENCES

TARGETS = {env_id: REFERENCES[env_id].zoo for env_id in bench_sb3_compare.ZOO if REFERENCES[env_id].locomotion}
"""The zoo's PPO return of each locomotion task whose zoo settings `bench_sb3_compare` knows."""

SETTINGS = ("ours", "sb3_zoo")


def our_config(task: str, max_steps: int, eval_every: int, seed: int) -> TrainerConfig:
    """The task's preset for `max_steps` env steps, evaluated every `eval_every` env steps (rounded to whole
    iterations), no checkpoints before the end, no video, export or metrics."""
    preset = presets.resolve(task)
    settings = {
        "total_steps": max_steps,
        "seed": seed,
        "eval_every": max(1, round(eval_every / preset.batch_size)),
        "checkpoint_every": 1_000_000,
        "video_episodes": 0,
        "export": False,
        "metrics_port": 0,
    }
    return presets.resolve(task, settings)


def reached(evaluations: list[list[float]], target: float) -> dict[str, Any]:
    """The first of `evaluations` ([env steps, mean return, training seconds]) at or above `target`."""
    for steps, mean, seconds in evaluations:
        if mean >= target:
            return {"reached": True, "at_env_steps": int(steps), "minutes": round(seconds / 60, 2), "return": mean}
    return {"reached": False}


def run_ours(config: TrainerConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        result = loop.train(config, Path(scratch) / "run")
    evaluations = [
        [steps, round(mean, 1), round(seconds, 1)]
        for (steps, mean), seconds in zip(result.evaluations, result.evaluated_after, strict=True)
    ]
    training = result.wall_seconds - result.evaluation_seconds
    return {"evaluations": evaluations, "env_steps": result.env_steps, "steps_per_s": result.env_steps / training}


def run_zoo(python: Path, config: TrainerConfig, eval_every: int, target: float) -> dict[str, Any]:
    setting = {**bench_sb3_compare.zoo(config), "evaluate_every": eval_every, "target": target}
    report = bench_sb3_compare.run_sb3(python, setting)
    evaluations = [[int(steps), round(mean, 1), round(seconds, 1)] for steps, mean, seconds in report["evaluations"]]
    steps = report["env_steps"]
    return {"evaluations": evaluations, "env_steps": steps, "steps_per_s": steps / report["wall_s"]}


def measure(task: str, args: argparse.Namespace, python: Path | None) -> dict[str, Any]:
    config = our_config(task, args.max_steps, args.eval_every, args.seed)
    target = args.target if args.target is not None else TARGETS[config.env_id]
    record: dict[str, Any] = {"env_id": config.env_id, "target": target}
    for setting in args.settings:
        run = run_ours(config) if setting == "ours" else run_zoo(python, config, args.eval_every, target)
        run["steps_per_s"] = round(run["steps_per_s"], 1)
        record[setting] = {**reached(run["evaluations"], target), **run}
    if all(record.get(setting, {}).get("reached") for setting in SETTINGS):
        record["minutes_ratio"] = round(record["sb3_zoo"]["minutes"] / record["ours"]["minutes"], 2)
    return record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tasks = [name for name in presets.names() if presets.resolve(name).env_id in TARGETS]
    parser.add_argument("--tasks", nargs="+", default=tasks, choices=tasks, help="presets to train")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--max-steps", type=int, default=2_000_000, help="env steps at most (default 2M)")
    parser.add_argument("--eval-every", type=int, default=81_920, help="env steps between evaluations")
    parser.add_argument("--target", type=float, help="mean return to reach (default: the zoo's, per task)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--venv", type=Path, default=bench_sb3_compare.VENV, help="the SB3 venv")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("max_steps", "eval_every"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    python = bench_sb3_compare.venv_python(args.venv, setup=False) if "sb3_zoo" in args.settings else None
    load_before = os.getloadavg()[0]
    tasks = {task: measure(task, args, python) for task in args.tasks}
    measured = {"max_steps": args.max_steps, "eval_every": args.eval_every, "seed": args.seed}
    measured["load_average_1m"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps({"measured": measured, **tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
