"""What `agents-operator local` tells a person: progress while the job runs, and a summary at its end.

Progress is read from the chief's /metrics while it serves them. Its last numbers lag the job's (the
chief reports before the other workers' last pushes, and it stops serving before it exits), so the summary
prefers the chief's final record in the run directory (`rundir.SUMMARY_FILE`) when this run wrote one. A
failure is explained by the last error line of the failed replica's log, which the console shows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from agents_operator import contract, exported
from agents_operator.api import AgentsJob
from agents_operator.reconcile.rules import Outcome
from agents_operator.trainer import rundir
from agents_operator.trainer.progress import Progress

ATTEMPT_LINE = "--- {time} start, attempt {attempt} ---"
"""Written into a replica's log before each start; the last one opens the latest attempt."""
_ATTEMPT_TAIL = " start, attempt "
_ERROR_WORDS = ("error", "exception", "killed", "fatal")

FINAL_METRICS = {
    "env_steps": contract.METRIC_ENV_STEPS,
    "global_step": contract.METRIC_GLOBAL_STEP,
    "mean_return": contract.METRIC_MEAN_RETURN,
    "eval_mean_return": contract.METRIC_EVAL_RETURN,
}
"""The chief's final record (`rundir.write_summary` keys) as the metrics they stand for."""


def attempt_line(attempt: int) -> str:
    return ATTEMPT_LINE.format(time=time.strftime("%Y-%m-%d %H:%M:%S"), attempt=attempt)


def last_error(log: str) -> str | None:
    """The line of a replica's log that says why its latest attempt ended: the last line naming an error
    (a one-line usage error, or the exception line closing a traceback), else its last line; None when
    the attempt wrote nothing."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("--- ") and _ATTEMPT_TAIL in line]
    attempt = [line.strip() for line in lines[starts[-1] + 1 if starts else 0 :] if line.strip()]
    if not attempt:
        return None
    return next((line for line in reversed(attempt) if any(w in line.lower() for w in _ERROR_WORDS)), attempt[-1])


def read_last_error(path: Path) -> str | None:
    try:
        return last_error(path.read_text(errors="replace"))
    except OSError:
        return None


class Tracker:
    """Job-wide progress from the chief's metrics; steps per second are measured here, over the whole run."""

    def __init__(self, total_steps: int, out: TextIO):
        self.display = Progress(total_steps, out)
        self.last: dict[str, float] = {}
        self._first: tuple[float, float] | None = None
        self.rate = 0.0

    def update(self, metrics: dict[str, float] | None) -> None:
        if not metrics or contract.METRIC_ENV_STEPS not in metrics:
            return  # the chief does not know the run's counters yet (restoring a checkpoint, joining the ps)
        now, steps = time.monotonic(), metrics[contract.METRIC_ENV_STEPS]
        if self.last and steps == self.last.get(contract.METRIC_ENV_STEPS):
            return  # nothing new: the chief is between iterations, or done
        if self._first is None:
            self._first = (now, steps)
        elif now > self._first[0]:
            self.rate = (steps - self._first[1]) / (now - self._first[0])
        self.last = metrics
        self.display.update(int(steps), metrics.get(contract.METRIC_MEAN_RETURN), self.rate)

    def say(self, message: str) -> None:
        """A line of the launcher's (a replica exited, restarted) that leaves the bar intact."""
        self.display.say(message)

    def finish(self, logdir: Path, since: float) -> None:
        """Take the chief's final record when this run (started at wall time `since`) wrote one, show it on
        the bar, and end the bar."""
        final = rundir.load_summary(logdir, since)
        if final:
            self.last = {**self.last, **{FINAL_METRICS[k]: v for k, v in final.items() if k in FINAL_METRICS}}
            steps = self.last.get(contract.METRIC_ENV_STEPS, 0.0)
            self.display.update(int(steps), self.last.get(contract.METRIC_MEAN_RETURN), self.rate)
        self.display.close()

    def summary(self) -> str | None:
        """One line: env steps, the return (the last evaluation's when there is one), speed; None when the
        chief never reported anything."""
        if not self.last:
            return None
        parts = [f"{int(self.last.get(contract.METRIC_ENV_STEPS, 0)):,} env steps"]
        if contract.METRIC_GLOBAL_STEP in self.last:
            parts.append(f"global step {int(self.last[contract.METRIC_GLOBAL_STEP]):,}")
        if contract.METRIC_EVAL_RETURN in self.last:
            evaluation = self.last[contract.METRIC_EVAL_RETURN]
            parts.append(f"eval return {evaluation:.1f} (deterministic policy, last evaluation)")
        if contract.METRIC_MEAN_RETURN in self.last:
            parts.append(f"training return {self.last[contract.METRIC_MEAN_RETURN]:.1f} (last batch's episodes)")
        if self.rate:
            parts.append(f"{self.rate:.0f} env steps/s")
        return ", ".join(parts)


def opening_line(job: AgentsJob, servers: int, logdir: Path) -> str:
    """What the console says first: the job's replicas (`servers` env-server processes) and its run directory."""
    counts = job.spec.replica_specs.counts()
    placement = job.spec.environments.placement
    return (
        f"running AgentsJob {job.name}: {counts['ps']} ps, {counts['worker']} worker(s)"
        + (f", {counts['evaluator']} evaluator" if counts["evaluator"] else "")
        + (f", {servers} env server(s) ({placement})" if servers else "")
        + f"; run directory {logdir}"
    )


def closing_lines(
    outcome: Outcome | None, logdir: Path, since: float, summary: str | None, failed: tuple[str, Path] | None
) -> list[str]:
    """The console's last words on a job: how it ended (None: interrupted), why (the failed replica's own error
    line: `failed` is its name and log), what it reached (`summary`), and where its files are (those written
    since `since`: not a previous run's)."""
    if outcome is None:
        lines = ["Interrupted: stopped by the user; every replica was stopped"]
    else:
        lines = [f"{outcome.condition} ({outcome.reason}): {outcome.message}"]
    error = read_last_error(failed[1]) if failed else None
    if error:
        lines.append(f"  {failed[0]}: {error}")
    if summary:
        lines.append(f"  {summary}")
    elif not error:  # a failure that says why needs no guess at it
        lines.append("  no progress was reported (the chief's /metrics never answered)")
    lines.append(f"  run directory: {logdir}  (logs and the job's status in {logdir / rundir.LOGS})")
    video, export = logdir / rundir.VIDEO, logdir / exported.DIRECTORY / exported.METADATA
    succeeded = outcome is not None and outcome.succeeded
    if succeeded and rundir.written_since(video, since):
        lines.append(f"  video: {video}")
    if succeeded and rundir.written_since(export, since):
        lines.append(f"  exported policy: {export.parent}  (agents-operator evaluate --model {export.parent})")
    return lines
