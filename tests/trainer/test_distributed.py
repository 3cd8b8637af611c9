"""The cluster as each replica joins it (trainer/distributed.py), without TensorFlow servers: waiting for a
peer with backoff, saying once what it waits for; who initialises the shared variables; what a worker's
membership sends to the ps tasks, and waiting until each can call the worker back."""

import socket

import pytest
import tensorflow as tf

from agents_operator import tfconfig
from agents_operator.local.processes import free_port
from agents_operator.trainer import distributed


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


def test_wait_until_gone_waits_for_listeners_to_go_and_says_so():
    notes = []
    with socket.create_server(("127.0.0.1", 0)) as listening:
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        distributed.wait_until_gone(lambda: [address], notes.append, timeout=0.3)
        assert notes == ["waiting for 1 other worker(s) to finish", f"gave up waiting after 0 s for: {address}"]
        notes.clear()
        members = [[address], [address], []]  # it gives its slot back while it still listens: not waited for
        distributed.wait_until_gone(lambda: members.pop(0), notes.append, timeout=30)
        assert notes == ["waiting for 1 other worker(s) to finish"] and not members
    notes.clear()
    distributed.wait_until_gone(lambda: [address], notes.append, timeout=30)  # closed now (it died): gone at once
    assert notes == []
    distributed.wait_until_gone(lambda: [], notes.append)
    assert notes == []


def test_the_first_line_of_a_graph_error_is_its_cause():
    message = (
        "Graph execution error:\n\nDetected at node 'save/RestoreV2' defined at (most recent call last):\n"
        "  File \"x.py\", line 1\nNode: 'save/RestoreV2'\nChecksum does not match: stored 1 vs. calculated 2\n"
        "\t [[{{node save/RestoreV2}}]]\n"
    )
    assert (
        distributed.first_line(RuntimeError(message))
        == "RuntimeError: Checksum does not match: stored 1 vs. calculated 2"
    )
    assert distributed.first_line(ValueError("")) == "ValueError"


class CallBackSession:
    """Fails the way a ps fails to reach a replaced worker's old IP, `failures` times, then answers."""

    def __init__(self, failures):
        self.failures, self.runs = failures, 0

    def run(self, calls):
        self.runs += 1
        if self.runs <= self.failures:
            raise tf.errors.UnavailableError(None, None, "failed to connect to all addresses; connect() timed out")
        return [0.0 for _ in calls]


def test_a_worker_waits_until_every_ps_can_call_it_back_and_says_so_once(caplog):
    caplog.set_level("INFO")
    sleeps = []
    session = CallBackSession(failures=3)
    distributed.wait_until_called_back(session, ["call"], sleep=sleeps.append)
    assert session.runs == 4 and sleeps == [0.5, 1.0, 2.0]
    assert caplog.text.count("a ps cannot reach this worker yet (UnavailableError: failed to connect") == 1
    assert "every ps reaches this worker now" in caplog.text


def test_a_ps_that_never_reaches_the_worker_raises_after_the_timeout():
    with pytest.raises(tf.errors.UnavailableError):
        distributed.wait_until_called_back(CallBackSession(failures=10**6), ["call"], sleep=lambda _: None, timeout=0)


def test_membership_sends_nothing_from_the_worker_but_what_each_ps_calls_back_for():
    cluster = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222"]}
    with tf.Graph().as_default():
        membership = distributed.Membership.create(distributed.Cluster(tfconfig.TFConfig(cluster, "worker", 1)))
    for op in (membership.join, membership.leave):
        assert {i.op.device for i in op.inputs} == {"/job:ps/task:0"}, op.name
    assert [c.device for c in membership.calls] == ["/job:ps/task:0", "/job:ps/task:1"]
    assert {c.op.inputs[0].device for c in membership.calls} == {"/job:worker/task:1"}
