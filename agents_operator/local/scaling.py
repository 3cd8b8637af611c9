"""`agents-operator scale`: a new worker count for an elastic job that `agents-operator local` runs, as
`kubectl scale` is for one on a cluster.

The launcher keeps the manifest it runs in its run directory (`JOB_FILE`); `request` judges the new count
against it with the API's own rules (`api.parse_job` with the old job: the bounds, the immutable counts) and
leaves it in `REQUEST_FILE`, which the launcher takes at its next poll and applies to its job, so that the
plan creates the added workers and stops the removed ones (the highest indices) as the operator would.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import yaml

from agents_operator import api
from agents_operator.trainer import rundir

JOB_FILE = "job.yaml"
"""In the run directory's logs: the manifest the launcher runs (the job as the API server would hold it)."""
REQUEST_FILE = "scale.yaml"
"""In the run directory's logs: a worker count asked for and not yet taken by the launcher."""
TAKEN_SECONDS = 10.0
"""How long `request` waits for the launcher to take a request (it polls every half second)."""


class ScaleError(Exception):
    """A scale that cannot be made: the message says why, in one line."""


def scaled(manifest: dict, workers: int) -> api.AgentsJob:
    """The job of `manifest` with `workers` workers; api.InvalidJob when its rules refuse the change."""
    new = copy.deepcopy(manifest)
    new["spec"]["replicaSpecs"]["worker"]["replicas"] = workers
    return api.parse_job(new, old=manifest)


def write_job(logdir: Path, manifest: dict) -> None:
    """Keep the manifest the launcher runs (at its start, and after each scale)."""
    logs = Path(logdir) / rundir.LOGS
    logs.mkdir(parents=True, exist_ok=True)
    (logs / JOB_FILE).write_text(yaml.safe_dump(manifest, sort_keys=False))


def request(logdir: Path, workers: int, timeout: float = TAKEN_SECONDS) -> None:
    """Ask the launcher running in `logdir` for `workers` workers; ScaleError when there is none, or the job's
    rules refuse it (naming the field, as the API server would)."""
    logs = Path(logdir) / rundir.LOGS
    try:
        manifest = yaml.safe_load((logs / JOB_FILE).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ScaleError(f"{logdir}: no job that `agents-operator local` runs ({err})") from None
    try:
        scaled(manifest, workers)
    except api.InvalidJob as err:
        raise ScaleError(str(err)) from None
    path = logs / REQUEST_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(yaml.safe_dump({"workers": workers}))
    os.replace(partial, path)
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            path.unlink(missing_ok=True)
            raise ScaleError(f"{logdir}: no `agents-operator local` took the request within {timeout:.0f} s")
        time.sleep(0.1)


def take(logdir: Path) -> int | None:
    """The worker count asked for since the last look (the request is gone then), or None."""
    path = Path(logdir) / rundir.LOGS / REQUEST_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    value = (yaml.safe_load(text) or {}).get("workers") if text.strip() else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
