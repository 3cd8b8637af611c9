"""The operator's read of a chief's /metrics (metrics_reader.py): the body when it is one, None when it is not
up, not 200 or over METRICS_LIMIT (refused, not read); the port from the job's trainer settings."""

from __future__ import annotations

import contextlib
import http.server
import logging
import threading
from collections.abc import Iterator

import pytest

from agents_operator import metrics_reader
from tests.world import make_job

SAMPLE = b"agents_trainer_global_step 42\n"


class Chief(http.server.ThreadingHTTPServer):
    """Serves `size` bytes of samples with `status`, declaring the length when `declare`."""

    def __init__(self, size: int, status: int = 200, declare: bool = True):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.size, self.status, self.declare = size, status, declare

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/metrics"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Chief

    def do_GET(self) -> None:
        self.send_response(self.server.status)
        if self.server.declare:
            self.send_header("Content-Length", str(self.server.size))
        self.end_headers()
        body = SAMPLE * (self.server.size // len(SAMPLE) + 1)
        with contextlib.suppress(OSError):  # the reader hung up
            self.wfile.write(body[: self.server.size])

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chief() -> Iterator:
    servers: list[Chief] = []

    def start(size: int, status: int = 200, declare: bool = True) -> Chief:
        server = Chief(size, status, declare)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("declare", [True, False])
async def test_a_body_within_the_limit_is_read_whole(chief, declare):
    server = chief(metrics_reader.METRICS_LIMIT, declare=declare)
    body = await metrics_reader.fetch(server.url, 10.0, "ns/pj")
    assert len(body) == metrics_reader.METRICS_LIMIT and body.startswith(SAMPLE)


@pytest.mark.parametrize("declare", [True, False], ids=["declared", "undeclared"])
async def test_a_body_over_the_limit_is_refused_and_said(chief, caplog, declare):
    server = chief(metrics_reader.METRICS_LIMIT + 1, declare=declare)
    with caplog.at_level(logging.WARNING, logger=metrics_reader.__name__):
        assert await metrics_reader.fetch(server.url, 10.0, "ns/pj") is None
    assert f"metrics of ns/pj at {server.url} refused: larger than {metrics_reader.METRICS_LIMIT} bytes" in caplog.text


async def test_an_answer_that_is_not_200_is_none(chief, caplog):
    server = chief(len(SAMPLE), status=503)
    with caplog.at_level(logging.WARNING, logger=metrics_reader.__name__):
        assert await metrics_reader.fetch(server.url, 10.0, "ns/pj") is None
    assert caplog.text == ""  # not up yet: nothing to warn about


async def test_a_chief_that_is_not_up_is_none(chief):
    server = chief(0)
    url = server.url
    server.shutdown()
    server.server_close()
    assert await metrics_reader.fetch(url, 10.0, "ns/pj") is None


def test_the_port_is_the_jobs_own_and_none_when_it_serves_none_or_cannot_run():
    assert metrics_reader.metrics_port(make_job()) == 9090  # the pendulum preset's
    job = make_job()
    job["spec"]["trainer"]["metricsPort"] = 9100
    assert metrics_reader.metrics_port(job) == 9100
    job["spec"]["trainer"]["metricsPort"] = 0
    assert metrics_reader.metrics_port(job) is None
    assert metrics_reader.metrics_port(make_job(preset="no_such_preset")) is None
    assert metrics_reader.metrics_port({"metadata": {"name": "pj"}}) is None
