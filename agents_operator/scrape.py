"""Reading a trainer's progress from its Prometheus /metrics endpoint (the chief serves it).

The metric names are `contract`'s and the text parser `chiefmetrics`', shared with the operator.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request

from agents_operator import chiefmetrics


def scrape(url: str, timeout: float = 2.0) -> dict[str, float] | None:
    """The metrics at `url` without NaN samples (not measured yet), or None when the endpoint does not
    answer (not started yet, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            samples = chiefmetrics.parse_metrics(response.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return {name: value for name, value in samples.items() if not math.isnan(value)}
