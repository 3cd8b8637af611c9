"""The chief's /metrics (trainer/metrics.py): the gauges served, unknown counters left out until known."""

import socket
import urllib.request

from agents_operator.trainer.metrics import Metrics


def test_metrics_endpoint_serves_the_gauges():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics = Metrics(port)
    try:
        unknown = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        metrics.env_steps.set(1234)
        metrics.mean_return.set(-150.5)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics.close()
    assert "agents_trainer_env_steps 1234.0" in text
    # a resumed run's counters are not 0 before the chief has read them: unknown, left out by readers
    assert "agents_trainer_env_steps NaN" in unknown and "agents_trainer_global_step NaN" in unknown
    assert "agents_trainer_mean_return -150.5" in text
