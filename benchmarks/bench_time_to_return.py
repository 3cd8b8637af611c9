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
ran at 400-600 env steps/s on the 2-core build machine), so run them on a quiet machine, one at a time. Each
finished run is kept in `--results` (<task>-seed<seed>/<setting>.json, with the UTC day it ran and what it
trained), and a later invocation on the same day that would train the same again takes it from there instead:
an interrupted comparison goes on where it stopped, and both sides of a ratio still ran on one day. A kept run
of another day or of other settings is trained again; the old file stays beside it, named with its day.

`--set KEY=VALUE` (repeatable, as in `bench_learning_table.py`) times a variant of the presets (a candidate
preset) on this trainer's side: its runs are kept as `ours+<settings>.json` beside the preset's, and SB3's run,
which no preset setting changes, is the one of the day, trained once for the preset and its variants alike.

    .venv/bin/python benchmarks/bench_time_to_return.py --tasks hopper --settings ours
    .venv/bin/python benchmarks/bench_time_to_return.py --tasks cheetah hopper walker --settings ours sb3_zoo
    .venv/bin/python benchmarks/bench_time_to_return.py --tasks cheetah --set plain_init=pytorch
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
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
from bench_learning_table import REFERENCES, add_variant_flag, bounded, parse_variant, variant_name

TARGETS = {env_id: REFERENCES[env_id].zoo for env_id in bench_sb3_compare.ZOO if REFERENCES[env_id].locomotion}
"""The zoo's PPO return of each locomotion task whose zoo settings `bench_sb3_compare` knows."""

SETTINGS = ("ours", "sb3_zoo")

RESULTS = bench_sb3_compare.ROOT / "runs" / "time-to-return"
"""Where finished runs are kept by default (`runs/` is not in the repository)."""


FIXED_SETTINGS: dict[str, Any] = {
    "checkpoint_every": 1_000_000,
    "video_episodes": 0,
    "export": False,
    "metrics_port": 0,
}
"""What every timed run of this trainer leaves out: no checkpoints before the end, no video, export or metrics."""

OWN_SETTINGS = ("total_steps", "seed", "eval_every", *FIXED_SETTINGS)
"""The settings `our_config` sets itself, which a variant may not (its flags set the first three)."""


def our_config(
    task: str, max_steps: int, eval_every: int, seed: int, variant: dict[str, Any] | None = None
) -> TrainerConfig:
    """The task's preset (with the `variant`'s settings) for `max_steps` env steps, evaluated every `eval_every`
    env steps (rounded to whole iterations), with the `FIXED_SETTINGS`."""
    preset = presets.resolve(task, variant)
    own = {
        "total_steps": max_steps,
        "seed": seed,
        "eval_every": max(1, round(eval_every / preset.batch_size)),
        **FIXED_SETTINGS,
    }
    return presets.resolve(task, {**(variant or {}), **own})


def kept_as(results: Path, task: str, seed: int, setting: str, variant: dict[str, Any]) -> Path:
    """Where the run of `setting` is kept: <task>-seed<seed>/<setting>.json, `ours+<variant>.json` for a variant."""
    name = f"{setting}+{variant_name(variant)}" if setting == "ours" and variant else setting
    return results / f"{task}-seed{seed}" / f"{bounded(name)}.json"


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


def trained(setting: str, config: TrainerConfig, eval_every: int, target: float) -> dict[str, Any]:
    """What the run of `setting` trains and how it is read, all of which a kept run must share to be reused."""
    side = config.model_dump(mode="json") if setting == "ours" else bench_sb3_compare.zoo(config)
    return json.loads(json.dumps({"setting": side, "eval_every": eval_every, "target": target}))  # as kept


def today() -> str:
    return datetime.datetime.now(datetime.UTC).date().isoformat()


def set_aside(path: Path, day: str) -> None:
    """Rename the kept run at `path` with its `day` (and a number, if that name is taken), so that the run
    trained in its place does not overwrite it."""
    aside = path.with_name(f"{path.stem}.{day}{path.suffix}")
    number = 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{path.stem}.{day}.{number}{path.suffix}")
    path.rename(aside)
    print(f"{path}: kept from {day} or of other settings, set aside as {aside.name}", file=sys.stderr)


def kept(path: Path, what: dict[str, Any]) -> dict[str, Any] | None:
    """The run kept at `path` when it ran today and trained `what`; None when there is none. A kept run of
    another day or of other settings is set aside (it is not lost when this one is written)."""
    if not path.exists():
        return None
    try:
        run = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: not a kept run ({error}); move it away to train the run again") from None
    if not isinstance(run, dict) or not isinstance(run.get("run"), dict):
        raise SystemExit(f"{path}: not a kept run (no 'run' object); move it away to train the run again")
    if run.get("day") != today() or run.get("trained") != what:
        set_aside(path, str(run.get("day", "undated")))
        return None
    return run


def run_setting(
    path: Path, setting: str, config: TrainerConfig, args: argparse.Namespace, python: Path | None, target: float
) -> dict[str, Any]:
    """The run of `setting`, kept at `path` or trained now (and kept there)."""
    what = trained(setting, config, args.eval_every, target)
    run = kept(path, what)
    if run is not None:
        print(f"{path}: kept from earlier today, not trained again", file=sys.stderr)
        return {**run["run"], "day": run["day"]}
    load_before = os.getloadavg()[0]
    run = run_ours(config) if setting == "ours" else run_zoo(python, config, args.eval_every, target)
    run["steps_per_s"] = round(run["steps_per_s"], 1)
    run["load_average_1m"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    path.parent.mkdir(parents=True, exist_ok=True)
    day = today()
    path.write_text(json.dumps({"day": day, "trained": what, "run": run}) + "\n")
    return {**run, "day": day}


def measure(task: str, args: argparse.Namespace, python: Path | None) -> dict[str, Any]:
    config = our_config(task, args.max_steps, args.eval_every, args.seed, args.variant)
    target = args.target if args.target is not None else TARGETS[config.env_id]
    record: dict[str, Any] = {"env_id": config.env_id, "target": target}
    if args.variant:
        record["variant"] = variant_name(args.variant)
    for setting in args.settings:
        path = kept_as(args.results, task, args.seed, setting, args.variant)
        run = run_setting(path, setting, config, args, python, target)
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
    add_variant_flag(
        parser, "a variant of the presets for this trainer's side: this setting changed, YAML value; repeatable"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help=f"finished runs (default {RESULTS.relative_to(bench_sb3_compare.ROOT)})",
    )
    return parser


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (SystemExit naming the flag), `--set` as a dict of settings."""
    args = build_parser().parse_args(argv)
    for name in ("max_steps", "eval_every"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    args.variant = parse_variant(args.variant, args.tasks)
    if clash := sorted(set(args.variant) & set(OWN_SETTINGS)):
        raise SystemExit(f"--set {clash[0]}: set by this benchmark itself (--max-steps, --seed, --eval-every)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    # The trainer's progress and evaluations as they come, beside SB3's (which `run_sb3` passes on).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    python = bench_sb3_compare.venv_python(args.venv, setup=False) if "sb3_zoo" in args.settings else None
    load_before = os.getloadavg()[0]
    tasks = {task: measure(task, args, python) for task in args.tasks}
    measured = {"max_steps": args.max_steps, "eval_every": args.eval_every, "seed": args.seed}
    measured["load_average_1m"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps({"measured": measured, **tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
