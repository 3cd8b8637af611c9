"""What needs a hook into the operator, on the real API server: progress from a chief, work kept off the event
loop, the loop's lag.

These tests run the operator in-process (`operator_main.serve`, as `agents-operator run` runs it, with the
chart's ServiceAccount) so that they can reach into it: the chief's address (`http://<job>-worker-0.<ns>.svc`)
resolves only inside a cluster, so that one lookup points at a local HTTP server playing the chief, and
progress is read every second rather than every 30. Everything else (kopf, its indexes, the status writes) is
the operator's own.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agents_operator import operator_main, reconcile, render
from agents_operator.controller import Controller
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


@dataclass
class InProcess:
    controller: Controller
    loop: asyncio.AbstractEventLoop


@pytest.fixture
def in_process(kube, namespace, chart_operator, chief) -> Iterator[InProcess]:
    chart_operator.stop()  # one operator per namespace
    options = operator_main.OperatorOptions(
        namespaces=[namespace], kubeconfig=str(chart_operator.kubeconfig()), progress_interval=1.0
    )
    stop, ready = threading.Event(), threading.Event()
    hooked: list[InProcess] = []

    def hook(controller: Controller) -> None:
        controller.metrics_url = lambda job, ns, port: chief
        hooked.append(InProcess(controller, asyncio.get_running_loop()))

    thread = threading.Thread(
        target=lambda: asyncio.run(
            operator_main.serve(options, stop_flag=stop, ready_flag=ready, controller_hook=hook)
        ),
        daemon=True,
    )
    thread.start()
    assert ready.wait(30), "the operator did not start"
    yield hooked[0]
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


def test_planning_and_rendering_run_off_the_event_loop(kube, namespace, in_process, monkeypatch):
    on_loop: list[tuple[str, bool]] = []

    def recording(module, name):
        original = getattr(module, name)

        def call(*args, **kwargs):
            on_loop.append((name, asyncio._get_running_loop() is not None))
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    for module, name in ((reconcile, "plan"), (render, "pod"), (render, "non_pod_children")):
        recording(module, name)
    Cluster(kube, namespace).started()
    assert {name for name, _ in on_loop} == {"plan", "pod", "non_pod_children"}
    assert not any(loop for _, loop in on_loop)


def test_a_blocking_call_on_the_event_loop_shows_in_the_lag_metric(in_process):
    registry = in_process.controller.metrics.registry

    def over(seconds: str) -> float:
        count = registry.get_sample_value("agents_operator_event_loop_lag_seconds_count") or 0.0
        return count - (
            registry.get_sample_value("agents_operator_event_loop_lag_seconds_bucket", {"le": seconds}) or 0.0
        )

    before = over("0.25")
    in_process.loop.call_soon_threadsafe(time.sleep, 0.5)
    wait_for(lambda: over("0.25") > before, 10, "a lag over 0.25 s")
