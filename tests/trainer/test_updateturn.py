"""Async updates in turn (trainer/updateturn.py), on a ps and two worker servers in this process: one turn, taken
and given back; a turn whose holder went away comes back."""

import socket
import threading

import pytest
import tensorflow as tf

from agents_operator import tfconfig
from agents_operator.trainer import distributed, updateturn
from agents_operator.trainer.learner import Learner
from tests.trainer.learners import ACT, OBS, small_config

pytestmark = pytest.mark.timeout(120)

ALIVE = staticmethod(lambda slot: False)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def tasks(monkeypatch) -> dict[str, list[str]]:
    """A fresh ps and two workers (TensorFlow's servers cannot be stopped: each test starts its own)."""
    monkeypatch.setattr(updateturn, "POLL_SECONDS", 0.3)
    tasks = {"ps": [f"localhost:{_port()}"], "worker": [f"localhost:{_port()}" for _ in range(2)]}
    spec = tf.train.ClusterSpec(tasks)
    servers = [tf.distribute.Server(spec, kind, i, start=True) for kind in tasks for i in range(len(tasks[kind]))]
    return {**tasks, "targets": [server.target for server in servers[1:]]}


class Worker:
    """Worker `slot`'s turn in a graph and session of its own (a process of the job)."""

    def __init__(self, tasks: dict, slot: int):
        self.cluster = distributed.Cluster(tfconfig.TFConfig({k: tasks[k] for k in ("ps", "worker")}, "worker", slot))
        graph = tf.Graph()
        with graph.as_default():
            self.turn = updateturn.UpdateTurn.create(self.cluster)
        config = self.cluster.session_config(1)
        self.session = tf.compat.v1.Session(tasks["targets"][slot], graph=graph, config=config)

    def join(self, gone=ALIVE) -> None:
        self.turn.join(self.session, self.cluster.is_chief, gone)

    def take(self, gone=ALIVE) -> float:
        return self.turn.take(self.session, self.cluster.is_chief, gone)

    def take_in_thread(self, gone=ALIVE) -> threading.Thread:
        thread = threading.Thread(target=self.take, args=(gone,), daemon=True)
        thread.start()
        return thread

    def state(self) -> tuple[int, int]:
        """(tokens, holder)."""
        tokens, holder = self.session.run([self.turn.tokens, self.turn.holder])
        return int(tokens), int(holder)


def test_one_worker_updates_at_a_time(tasks):
    chief, other = Worker(tasks, 0), Worker(tasks, 1)
    chief.join()
    other.join()
    assert chief.state() == (1, updateturn.NOBODY)  # the chief put the one token in
    chief.take()
    assert chief.state() == (0, 0)
    waiting = other.take_in_thread()
    waiting.join(1.5)
    assert waiting.is_alive()  # several polls: a worker other than the chief only waits
    chief.turn.give(chief.session)
    waiting.join(10)
    assert not waiting.is_alive()
    assert other.state() == (0, 1)
    other.turn.give(other.session)
    assert other.state() == (1, updateturn.NOBODY)


def test_a_chief_that_joins_again_puts_no_second_token_in(tasks):
    chief, other = Worker(tasks, 0), Worker(tasks, 1)
    chief.join()
    Worker(tasks, 0).join()  # restarted, not holding the turn
    assert chief.state() == (1, updateturn.NOBODY)
    other.join()
    other.take()
    Worker(tasks, 0).join()  # restarted while the other worker holds the turn
    assert chief.state() == (0, 1)


def test_the_chief_makes_a_new_turn_when_the_holder_no_longer_listens(tasks, caplog):
    chief, other = Worker(tasks, 0), Worker(tasks, 1)
    chief.join()
    other.join()
    other.take()  # and then the worker dies with the turn
    dead = threading.Event()
    waiting = chief.take_in_thread(gone=lambda slot: dead.is_set() and slot == 1)
    waiting.join(1.5)
    assert waiting.is_alive()  # worker 1 still listens: it may be slow, the chief waits
    dead.set()
    waiting.join(10)
    assert not waiting.is_alive()
    assert chief.state() == (0, 0)
    assert "worker 1 held the turn to update and no longer listens" in caplog.text


def test_a_worker_back_after_going_away_with_the_turn_gives_it_back(tasks):
    chief, other = Worker(tasks, 0), Worker(tasks, 1)
    chief.join()
    other.join()
    other.take()
    again = Worker(tasks, 1)  # worker 1's process, restarted
    again.join()
    assert chief.state() == (1, updateturn.NOBODY)
    chief.take()
    assert chief.state() == (0, 0)


@pytest.mark.parametrize(
    "mode, updates, values, revalues",
    [
        ("async", "in_turn", "recomputed", True),
        ("async", "in_turn", "behaviour", False),
        ("async", "concurrent", "recomputed", False),
        ("sync", "in_turn", "recomputed", False),
    ],
)
def test_only_an_async_worker_in_turn_computes_gae_with_the_weights_it_pulls(tasks, mode, updates, values, revalues):
    """`Learner.revalues`: in turn, an async worker's update starts from the weights it pulls once it holds the
    turn, so its batch waits for them (`sampling.batch.Revaluing`); `overlap_values: behaviour` keeps the acting
    policy's values, and concurrent or sync updates do not wait."""
    cluster = distributed.Cluster(tfconfig.TFConfig({k: tasks[k] for k in ("ps", "worker")}, "worker", 1))
    config = small_config(mode=mode, async_updates=updates, overlap_values=values)
    learner = Learner(config, OBS, ACT, cluster, tasks["targets"][1])
    try:
        assert learner.revalues is revalues
        assert (learner.turn is not None) is (mode == "async" and updates == "in_turn")
    finally:
        learner.close()
