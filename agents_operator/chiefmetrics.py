"""The chief's /metrics as the job's progress: the Prometheus text parsed, the trainer's metrics (named in
`contract`) turned into status.progress. Pure module: the operator reads the endpoint over aiohttp, the local
launcher with `scrape`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agents_operator import naming
from agents_operator.contract import METRIC_ENV_STEPS, METRIC_GLOBAL_STEP, METRIC_MEAN_RETURN, METRIC_STEPS_PER_SECOND
from agents_operator.jobstatus import timestamp

PROGRESS_METRICS = {
    METRIC_GLOBAL_STEP: "globalStep",
    METRIC_ENV_STEPS: "envSteps",
    METRIC_MEAN_RETURN: "meanReturn",
    METRIC_STEPS_PER_SECOND: "stepsPerSecond",
}
INTEGER_FIELDS = {"globalStep", "envSteps"}


def parse_metrics(text: str) -> dict[str, float]:
    """Samples of a Prometheus text exposition, by name (labels ignored, the last sample wins)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head = line.split(None, 1)[0]
        if "{" in head:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        name, fields = name.strip(), rest.split()
        if not name or not fields:
            continue
        try:
            samples[name] = float(fields[0])
        except ValueError:
            continue
    return samples


def progress_from_metrics(text: str, now: datetime) -> dict[str, Any] | None:
    """status.progress from the chief's metrics, or None when none of the trainer's metrics is there."""
    return progress_from_samples(parse_metrics(text), now)


def progress_from_samples(samples: Mapping[str, float], now: datetime) -> dict[str, Any] | None:
    """status.progress from parsed samples (`parse_metrics`), or None when none of the trainer's is there."""
    progress: dict[str, Any] = {}
    for metric, field in PROGRESS_METRICS.items():
        value = samples.get(metric)
        if value is None or math.isnan(value) or math.isinf(value):
            continue
        progress[field] = int(value) if field in INTEGER_FIELDS else round(value, 4)
    if not progress:
        return None
    progress["updatedAt"] = timestamp(now)
    return progress


def metrics_url(job: str, namespace: str, port: int) -> str:
    """The chief's metrics endpoint through its headless Service."""
    return f"http://{naming.child_name(job, naming.WORKER, 0)}.{namespace}.svc:{port}/metrics"
