"""status.progress from the chief's /metrics, on the real API server.

The chief's address (`http://<job>-worker-0.<ns>.svc:<port>/metrics`) resolves only inside a cluster, so this
test runs the operator in-process (`operator_main.serve`, as `agents-operator run` runs it, with the chart's
ServiceAccount) with that one lookup pointed at a local HTTP server playing the chief, and reads progress every
second rather than every 30. Everything else (kopf, its indexes, the status writes) is the operator's own.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import pytest

from agents_operator import operator_main
from tests.e2e.cluster import Cluster, wait_for

pytestmark = pytest.mark.timeout(120)

METRICS = b"agents_trainer_global_step 42\nagents_trainer_env_steps 8192\nagents_trainer_mean_return -120.5\n"


class Chief(http.server.BaseHTTPRequestHandler):
    body = METRICS

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chief() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chief)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


@pytest.fixture
def in_process(kube, namespace, chart_operator, chief) -> Iterator[None]:
    chart_operator.stop()  # one operator per namespace
    options = operator_main.OperatorOptions(
        namespaces=[namespace], kubeconfig=str(chart_operator.kubeconfig()), progress_interval=1.0
    )
    stop, ready = threading.Event(), threading.Event()

    def point_at_chief(controller) -> None:
        controller.metrics_url = lambda job, ns, port: chief

    thread = threading.Thread(
        target=lambda: asyncio.run(
            operator_main.serve(options, stop_flag=stop, ready_flag=ready, controller_hook=point_at_chief)
        ),
        daemon=True,
    )
    thread.start()
    assert ready.wait(30), "the operator did not start"
    yield
    stop.set()
    thread.join(30)
    assert not thread.is_alive(), "the operator did not stop"


def test_progress_from_the_chiefs_metrics(kube, namespace, in_process):
    cluster = Cluster(kube, namespace)
    cluster.started()
    wait_for(lambda: (cluster.status().get("progress") or {}).get("globalStep") == 42, 30, "progress")
    progress = cluster.status()["progress"]
    assert progress["envSteps"] == 8192 and progress["meanReturn"] == -120.5 and progress["updatedAt"]
    assert cluster.state() == "Running"  # a progress write never rewinds the rest of the status
