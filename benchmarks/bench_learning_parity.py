"""Learning parity: 2 synchronous workers against 1 worker at the same total env steps; one JSON line.

Both jobs run the real trainer through the local launcher (1 ps each) with the same preset and the same
total environment steps, so the 2-worker job takes half as many iterations, each the mean of two workers'
changes. Reports both evaluation curves (env steps, deterministic return), the final returns and their
difference, and writes both learning curves on one chart with `agents-operator plot` (--out).

    .venv/bin/python benchmarks/bench_learning_parity.py --out parity.png
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from local_job_runs import run_job

from agents_operator.trainer import summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="pendulum")
    parser.add_argument("--steps", type=int, default=200_000, help="total env steps of each job")
    parser.add_argument("--out", type=Path, default=Path("parity.png"), help="chart of both learning curves")
    args = parser.parse_args(argv)
    figures: dict = {"benchmark": "parity", "preset": args.preset, "total_steps": args.steps}
    with tempfile.TemporaryDirectory() as root:
        logdirs = []
        for workers in (1, 2):
            logdir = Path(root) / f"{workers}-worker{'s' if workers > 1 else ''}"
            overrides = {"mode": "sync", "totalSteps": args.steps, "evalEvery": 4, "evalEpisodes": 10}
            outcome = run_job(args.preset, overrides, workers, logdir)
            if not outcome.succeeded:
                print(json.dumps({"error": f"{workers} worker(s): {outcome.message}"}))
                return 1
            curve = summaries.read_scalars(logdir, "eval/mean_return")
            figures[f"workers_{workers}"] = {
                "eval_curve": [(step, round(value, 1)) for step, value in curve],
                "final_eval_return": round(curve[-1][1], 1),
            }
            logdirs.append(logdir)
        plot = [sys.executable, "-m", "agents_operator", "plot", "--tag", "eval/mean_return", "--out", str(args.out)]
        subprocess.run([*plot, "--logdir", *map(str, logdirs)], check=True, capture_output=True)
    one, two = figures["workers_1"]["final_eval_return"], figures["workers_2"]["final_eval_return"]
    figures["final_difference"] = round(two - one, 1)
    figures["chart"] = str(args.out)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
