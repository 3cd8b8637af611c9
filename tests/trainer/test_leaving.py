"""How a worker leaves its job (trainer/leaving.py): SIGTERM asks a worker other than the chief to stop after its
iteration; the chief waits for the workers that are in the job, and for every slot while ps 0 is lost.
(tests/distributed/test_elastic.py runs it with the real trainer's processes.)"""

import os
import signal
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tensorflow as tf

from agents_operator import tfconfig
from agents_operator.trainer import distributed, leaving

CLUSTER = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3", "localhost:4"]}


def cluster(index: int) -> distributed.Cluster:
    return distributed.Cluster(tfconfig.TFConfig(CLUSTER, "worker", index))


def test_sigterm_asks_a_worker_to_leave_after_its_iteration_and_its_handler_goes_with_it():
    before = signal.getsignal(signal.SIGTERM)
    with leaving.StopRequest.on_sigterm(cluster(2)) as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("who", [None, 0], ids=["single process", "chief"])
def test_the_chief_and_a_single_process_keep_sigterms_default(who):
    before = signal.getsignal(signal.SIGTERM)
    with leaving.StopRequest.on_sigterm(None if who is None else cluster(who)) as stop:
        assert signal.getsignal(signal.SIGTERM) is before
    assert not stop.requested


class Flags:
    def __init__(self, result):
        self.result = result

    def members(self, _session):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def learner(result) -> SimpleNamespace:
    return SimpleNamespace(membership=Flags(result), session=None)


def test_the_chief_waits_for_the_workers_in_the_job_and_for_every_slot_while_ps_0_is_lost():
    assert leaving.other_members(cluster(0), learner([0, 2])) == ["localhost:4"]
    assert leaving.other_members(cluster(0), learner([0])) == []
    lost = tf.errors.UnavailableError(None, None, "ps 0 is gone")
    assert leaving.other_members(cluster(0), learner(lost)) == ["localhost:3", "localhost:4"]


def _chief_leaves(monkeypatch, tasks: dict, listener: socket.socket, calls: list, close_after_finish: bool) -> float:
    """Worker 0 of `tasks` (the chief, alone in the job) leaves it while `listener` closes 0.5 s after the start,
    or 0.5 s after the chief's `finish`; what it did goes to `calls`. The seconds it took."""
    closer = threading.Timer(0.5, listener.close)
    chief = SimpleNamespace(
        membership=Flags([0]),
        session=None,
        release_waiting=lambda: calls.append("release"),
        state=lambda: SimpleNamespace(iterations=3),
        finish=lambda: calls.append("finish") or (closer.start() if close_after_finish else None),
    )
    monkeypatch.setattr(leaving.checkpoints, "save", lambda *_: calls.append("save") or "ckpt-3")
    job = distributed.Cluster(tfconfig.TFConfig(tasks, "worker", 0))
    begin = time.monotonic()
    if not close_after_finish:
        closer.start()
    try:
        leaving.leave_cluster(job, chief, Path("unused"), SimpleNamespace(note=calls.append))
    finally:
        closer.cancel()
        listener.close()
    return time.monotonic() - begin


def test_the_chief_leaves_only_once_a_worker_that_gave_its_slot_back_has_exited(monkeypatch):
    """Worker 1 has left (no flag) but its process still listens for 0.5 s: the chief, whose exit makes the job
    Succeeded, waits for it to close first."""
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    calls = []
    tasks = {"ps": ["localhost:1"], "worker": ["localhost:2", address]}
    assert _chief_leaves(monkeypatch, tasks, listener, calls, close_after_finish=False) >= 0.5
    assert calls == ["release", "waiting for 1 other worker(s) to finish", "save", "checkpoint ckpt-3", "finish"]


def test_the_chief_returns_only_once_the_ps_it_told_the_job_is_over_has_exited(monkeypatch):
    """The ps still listens for 0.5 s after the chief's `finish` (which tells it the job is over): the chief, whose
    exit makes the job Succeeded, waits for it to exit, so that cleanPodPolicy Running does not delete it."""
    listener = socket.create_server(("127.0.0.1", 0))
    ps = f"127.0.0.1:{listener.getsockname()[1]}"
    calls = []
    assert _chief_leaves(monkeypatch, {"ps": [ps], "worker": ["localhost:2"]}, listener, calls, True) >= 0.5
    assert calls == ["release", "save", "checkpoint ckpt-3", "finish", "waiting for 1 parameter server(s) to exit"]
