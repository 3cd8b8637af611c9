"""Sync overhead benchmark: the share of each update spent with the parameter servers; one JSON line.

Runs a local AgentsJob of 1 ps and 2 workers twice, in `async` and in `sync` mode, and reads the chief's
`perf/ps_share` summaries: the seconds spent pulling the shared weights, pushing the iteration's change
(in sync mode this includes waiting for the other worker) and reading the state back, as a share of the
whole update (those plus the local PPO epochs). Goal: <= 0.10.

    .venv/bin/python benchmarks/bench_sync_overhead.py
    .venv/bin/python benchmarks/bench_sync_overhead.py --preset cheetah --iterations 6 --envs 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from local_job_runs import job_rates, run_job

from agents_operator import presets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum")
    parser.add_argument("--iterations", type=int, default=12, help="iterations per worker")
    parser.add_argument("--envs", type=int, default=8, help="environments per worker")
    args = parser.parse_args(argv)
    config = presets.resolve(args.preset, {"envs_per_worker": args.envs, "envs_per_process": args.envs})
    figures: dict = {"benchmark": "sync_overhead", "preset": args.preset, "workers": 2, "goal_ps_share": 0.10}
    for mode in ("async", "sync"):
        with tempfile.TemporaryDirectory() as logdir:
            overrides = {
                "envsPerWorker": args.envs,
                "envsPerProcess": args.envs,
                "mode": mode,
                "totalSteps": args.iterations * 2 * config.batch_size,
                "evalEvery": 0,
                "checkpointEvery": 1_000_000,
            }
            outcome = run_job(args.preset, overrides, 2, Path(logdir))
            if not outcome.succeeded:
                print(json.dumps({"error": f"{mode}: {outcome.message}"}))
                return 1
            rates = job_rates(Path(logdir), config.batch_size)
            figures[mode] = rates
            figures[f"{mode}_ps_share"] = rates["ps_share"]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
