"""Restart and success rules of an AgentsJob, shared by the operator and the local launcher. Pure module."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PERMANENT_EXIT_CODES = range(1, 128)
"""Under restartPolicy ExitCode these fail the job; 128 and above (signals, OOM kill, eviction) are retried."""


@dataclass(frozen=True)
class Outcome:
    """How a job ended: succeeded or not, a CamelCase reason and a sentence for people."""

    succeeded: bool
    reason: str
    message: str


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """Whether a replica that exited with `exit_code` (non-zero) is replaced rather than failing the job."""
    if restart_policy in ("Always", "OnFailure"):
        return True
    if restart_policy == "ExitCode":
        return exit_code not in PERMANENT_EXIT_CODES
    return False  # Never


def succeeded(success_policy: str, worker_exit_codes: Mapping[int, int | None]) -> bool:
    """Whether the job succeeded, from its workers' exit codes by index (None: still running or not started).

    ChiefWorker: worker 0 exited 0. AllWorkers: every worker exited 0.
    """
    if success_policy == "AllWorkers":
        return bool(worker_exit_codes) and all(code == 0 for code in worker_exit_codes.values())
    return worker_exit_codes.get(0) == 0
