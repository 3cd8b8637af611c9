"""The /metrics endpoint of the operator and the trainer under a flood of half-open connections."""

import asyncio
import os
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Gauge

from agents_operator import metrics_server
from agents_operator.metrics_server import MetricsServer
from agents_operator.trainer.metrics import Metrics
from tests.procnet import listening

FLOOD = 500


@pytest.fixture
def server():
    registry = CollectorRegistry()
    Gauge("agents_trainer_env_steps", "steps", registry=registry).set(42)
    served = MetricsServer(registry, "127.0.0.1", 0, timeout=1.0)
    yield served
    served.close()


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False  # still open, nothing sent
    except ConnectionResetError:
        return True


def test_half_open_connections_take_no_threads_and_are_dropped_after_the_timeout(server):
    threads = threading.active_count()
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(FLOOD)]
    try:
        for sock in flood:
            sock.sendall(b"GET /metr")  # a request that never ends
        assert "agents_trainer_env_steps 42.0" in _scrape(server.port)  # answered during the flood
        assert threading.active_count() <= threads
        time.sleep(1.5)  # the timeout, and some
        deadline = time.monotonic() + 5
        while not all(_closed_by_server(s) for s in flood) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_closed_by_server(s) for s in flood)
    finally:
        for sock in flood:
            sock.close()
    assert "agents_trainer_env_steps 42.0" in _scrape(server.port)


def test_only_the_most_recent_connections_are_held(server):
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(metrics_server.MAX_CONNECTIONS + 10)]
    try:
        time.sleep(0.3)
        open_now = [not _closed_by_server(s) for s in flood]
        assert sum(open_now) == metrics_server.MAX_CONNECTIONS and all(open_now[10:])
    finally:
        for sock in flood:
            sock.close()


@pytest.mark.parametrize(
    "request_line, status",
    [(b"GET /other HTTP/1.1", 404), (b"POST /metrics HTTP/1.1", 405), (b"nonsense", 400)],
)
def test_other_requests_get_an_error_status(server, request_line, status):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request_line + b"\r\nHost: x\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 %d " % status)


def test_close_stops_listening(server):
    port = server.port
    server.close()
    with pytest.raises(urllib.error.URLError):
        _scrape(port)


def test_metrics_listen_on_the_host_given():
    metrics = Metrics(_free_port(), "127.0.0.1")
    try:
        assert [str(address) for address in listening(os.getpid())] == ["127.0.0.1"]
    finally:
        metrics.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_it_starts_and_stops_from_inside_a_running_event_loop():
    """The operator starts it from its kopf loop; a second loop run on the caller's thread would be refused."""

    async def inside() -> str:
        served = MetricsServer(CollectorRegistry(), "127.0.0.1", 0)
        try:
            return await asyncio.to_thread(_scrape, served.port)
        finally:
            served.close()

    assert asyncio.run(inside()) == ""


def test_a_taken_port_is_an_oserror_and_leaves_no_thread(server):
    threads = threading.active_count()
    with pytest.raises(OSError):
        MetricsServer(CollectorRegistry(), "127.0.0.1", server.port)
    assert threading.active_count() == threads
