"""Cluster protocols with real TensorFlow servers: start in any order, shared variables, ps exits by itself."""

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agents_operator import tfconfig
from agents_operator.local.processes import free_port
from agents_operator.trainer import distributed

SCRIPT = Path(__file__).with_name("tiny_replica.py")


def test_wait_for_retries_until_the_name_resolves_and_the_port_listens(caplog):
    caplog.set_level("INFO")
    port = free_port()
    listener = socket.socket()
    sleeps = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            listener.bind(("127.0.0.1", port))
            listener.listen()

    try:
        distributed.wait_for("ps-0", f"127.0.0.1:{port}", sleep=fake_sleep)
    finally:
        listener.close()
    assert sleeps == [0.5, 1.0]  # exponential backoff
    assert "waiting for ps-0: nothing listens on" in caplog.text
    assert "ps-0 is up" in caplog.text


def test_wait_for_reports_a_name_that_does_not_resolve(caplog):
    caplog.set_level("INFO")
    calls = []

    def give_up(seconds):
        calls.append(seconds)
        if len(calls) > 5:
            raise TimeoutError

    with pytest.raises(TimeoutError):
        distributed.wait_for("ps-0", "no-such-host.invalid:2222", sleep=give_up)
    assert "does not resolve yet" in caplog.text
    assert calls == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]  # capped
    assert caplog.text.count("waiting for ps-0") == 1  # said once, not every retry


class FakeSession:
    def __init__(self, missing):
        self.missing = list(missing)

    def run(self, _):
        return self.missing.pop(0) if len(self.missing) > 1 else self.missing[0]


@pytest.mark.parametrize(
    ("is_chief", "missing", "initialised"),
    [(True, [["w"]], True), (True, [[]], False), (False, [["w"], ["w"], []], False)],
)
def test_prepare_session(is_chief, missing, initialised):
    calls = []
    session = FakeSession(missing)
    result = distributed.prepare_session(session, None, lambda: calls.append("init"), is_chief, sleep=lambda _: None)
    assert result is initialised
    assert calls == (["init"] if initialised else [])


def test_one_ps_two_workers_started_in_any_order_and_the_ps_exits_by_itself():
    ports = [free_port() for _ in range(3)]
    cluster = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}

    def start(task_type, index):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        env["TF_CONFIG"] = tfconfig.TFConfig(cluster, task_type, index).to_json()
        return subprocess.Popen(
            [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    # Workers first: they must wait for the ps rather than crash.
    worker1 = start("worker", 1)
    worker0 = start("worker", 0)
    timer = threading.Event()
    timer.wait(3)
    ps = start("ps", 0)
    outputs = {}
    for name, proc in (("worker0", worker0), ("worker1", worker1), ("ps", ps)):
        outputs[name] = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, outputs[name]
    assert "waiting for ps-0" in outputs["worker1"]
    assert "initialising them" in outputs["worker0"]  # the chief initialises ...
    assert "initialising them" not in outputs["worker1"]  # ... the others wait for it
    assert "w = [1.0, 1.0, 1.0, 1.0]" in outputs["worker0"]  # shared variables converged
    assert "every worker finished: ps 0 exits" in outputs["ps"]
