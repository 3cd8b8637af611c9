"""Overlapped sampling learns as the serial loop does: the same tasks, seeds and env steps, both ways; one JSON line.

For each task (`--tasks`, default pendulum at 100k env steps, cheetah and hopper at 1M: `BUDGETS`) and seed
(`--seeds`, default 0 1 2) the preset trains twice, serial (`overlap: false`) and overlapped (`overlap: true`,
the preset's `overlap_values` unless `--set overlap_values=...`), through `bench_learning_table`'s runs: the
same child processes, run directories under `--results` (resumed as that script resumes them), evaluations
and records (a run's return is its final evaluation: the deterministic policy, the preset's episodes, fixed
seeds).

The verdict per task (`within_seed_spread`) is the test this project states for "the same learning": the
overlapped runs' mean return is at least the serial runs' mean less one standard deviation of the serial
seeds (sample std). Also printed: each side's returns, mean, std, worst seed, training minutes and env steps
per second, and the ratio of the rates (overlapped / serial).

    .venv/bin/python benchmarks/bench_overlap_learning.py --tasks pendulum          # minutes
    .venv/bin/python benchmarks/bench_overlap_learning.py                            # about 1.5 hours on 2 cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning_table as table  # benchmarks/, also when imported from the tests

BUDGETS = {"pendulum": 100_000, "cheetah": 1_000_000, "hopper": 1_000_000}
"""The env steps each task trains for (issue: cheetah and hopper at 1M, Pendulum at 100k)."""


def side(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's summary over its seeds."""
    returns = [record["return"] for record in records]
    return {
        "returns": returns,
        "mean": round(statistics.fmean(returns), 1),
        "std": round(statistics.stdev(returns), 1) if len(returns) > 1 else 0.0,
        "worst": min(returns),
        "training_minutes": round(statistics.fmean(r["training_minutes"] for r in records), 2),
        "env_steps_per_s": round(statistics.fmean(r["env_steps_per_s"] for r in records), 1),
    }


def verdict(serial: dict[str, Any], overlapped: dict[str, Any]) -> dict[str, Any]:
    """The comparison of the two sides (module docstring)."""
    return {
        "return_difference": round(overlapped["mean"] - serial["mean"], 1),
        "within_seed_spread": overlapped["mean"] >= serial["mean"] - serial["std"],
        "steps_per_s_ratio": round(overlapped["env_steps_per_s"] / serial["env_steps_per_s"], 3),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, help="env steps for every run, instead of each task's budget")
    parser.add_argument(
        "--results", type=Path, default=table.ROOT / "runs" / "overlap-learning", help="run directories"
    )
    table.add_variant_flag(parser, "a setting of both sides")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps is not None and args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    common = table.parse_variant(args.variant, args.tasks)
    started, tasks = time.monotonic(), {}
    for task in args.tasks:
        steps = args.steps or BUDGETS[task]
        sides = {}
        for name, overlap in (("serial", False), ("overlapped", True)):
            variant = {**common, "overlap": overlap}
            sides[name] = side([table.ensure_run(args.results, task, s, steps, variant)[0] for s in args.seeds])
        tasks[task] = {"env_steps": steps, **sides, **verdict(sides["serial"], sides["overlapped"])}
    measured = {"seeds": args.seeds, "minutes": round((time.monotonic() - started) / 60, 1)}
    print(json.dumps({"measured": measured, "variant": table.variant_name(common), **tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
