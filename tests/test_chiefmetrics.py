"""The chief's /metrics as progress (chiefmetrics.py)."""

from __future__ import annotations

from agents_operator import chiefmetrics
from tests.world import NOW

METRICS = """\
# HELP agents_trainer_global_step Optimizer steps applied to the shared parameters.
# TYPE agents_trainer_global_step gauge
agents_trainer_global_step 1234.0
agents_trainer_env_steps{worker="0"} 5.0e+06
agents_trainer_mean_return -153.25
agents_trainer_env_steps_per_second NaN
python_gc_objects_collected_total{generation="0"} 1.0
"""


def test_progress_from_metrics():
    assert chiefmetrics.progress_from_metrics(METRICS, NOW) == {
        "globalStep": 1234,
        "envSteps": 5_000_000,
        "meanReturn": -153.25,
        "updatedAt": "2030-01-01T12:00:00Z",
    }
    assert chiefmetrics.progress_from_metrics("garbage here\n{}", NOW) is None


def test_metric_names_match_the_trainer():
    """The operator reads what the trainer serves (both take the names from `contract`)."""
    from prometheus_client import generate_latest

    from agents_operator.trainer.metrics import Metrics

    metrics = Metrics(port=0)
    try:
        served = chiefmetrics.parse_metrics(generate_latest(metrics.registry).decode())
    finally:
        metrics.close()
    assert set(chiefmetrics.PROGRESS_METRICS) <= set(served)


def test_metrics_url():
    assert chiefmetrics.metrics_url("j", "ns", 9090) == "http://j-worker-0.ns.svc:9090/metrics"
