"""Reading a trainer's progress from its Prometheus /metrics endpoint (the chief serves it)."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

GLOBAL_STEP = "agents_trainer_global_step"
ENV_STEPS = "agents_trainer_env_steps"
MEAN_RETURN = "agents_trainer_mean_return"
EVAL_RETURN = "agents_trainer_eval_mean_return"
STEPS_PER_SECOND = "agents_trainer_env_steps_per_second"


def parse(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition, by metric name (NaN samples left out)."""
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        if "{" in name:
            continue
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if not math.isnan(value):
            values[name] = value
    return values


def scrape(url: str, timeout: float = 2.0) -> dict[str, float] | None:
    """The metrics at `url`, or None when the endpoint does not answer (not started yet, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return parse(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
