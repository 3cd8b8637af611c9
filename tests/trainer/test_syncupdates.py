"""Synchronous updates with backup workers (trainer/syncupdates.py), in one process: three workers' graphs share the
queues by name as they do on ps 0. Each step is the mean of the first N - b changes for it; a late change is
dropped and counted; a worker waits for a token of a later step and discards older ones; a chief that takes over
starts a new step; N follows the membership flags: a worker that joins counts from the next step, one that
leaves at once."""

import logging
import time

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.trainer import syncupdates
from agents_operator.trainer.syncupdates import Aggregator, Placement, SyncUpdates

SLOTS = 3
pytestmark = pytest.mark.timeout(120)


class Job:
    """The shared weights and global step, and each worker's ops with its change fed."""

    def __init__(self, backup_workers: int, members: list[int] | None = None):
        self.graph = tf.Graph()
        with self.graph.as_default():
            v1 = tf.compat.v1
            self.flags = None if members is None else tf.Variable(members, dtype=tf.int32, name="membership")
            self.weights = [
                v1.get_variable("w0", [2], initializer=v1.zeros_initializer(), use_resource=True),
                v1.get_variable("w1", [2, 2], initializer=v1.zeros_initializer(), use_resource=True),
            ]
            self.step = v1.train.get_or_create_global_step()
            self.changes, self.workers = [], []
            for worker in range(SLOTS):
                changes = [v1.placeholder(tf.float32, w.shape) for w in self.weights]
                placement = Placement(worker, SLOTS, SLOTS - backup_workers, device=None, members=self.flags)
                self.changes.append(changes)
                self.workers.append(SyncUpdates.create(self.weights, changes, self.step, placement))
            init = v1.global_variables_initializer()
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.session.run(init)

    def push(self, worker: int, label: int, value: float) -> None:
        updates = self.workers[worker]
        feed = {updates.label: label}
        feed.update({c: np.full(c.shape, value, np.float32) for c in self.changes[worker]})
        self.session.run(updates.push, feed)

    def flag(self, worker: int, value: int) -> None:
        with self.graph.as_default():
            self.session.run(self.flags[worker].assign(value))

    def global_step(self) -> int:
        return int(self.session.run(self.step))

    def first_step_with_every_token_taken(self) -> None:
        """Workers 0 and 1 make step 1; its tokens all go (to workers that are not looked at)."""
        self.push(0, 0, 1.0)
        self.push(1, 0, 1.0)
        self.wait_for_step(1)
        for _ in range(SLOTS):
            self.session.run(self.workers[0].token)

    def wait_for_step(self, step: int) -> None:
        deadline = time.monotonic() + 30
        while self.global_step() < step:
            assert time.monotonic() < deadline, f"step {step} was not applied"
            time.sleep(0.01)


@pytest.fixture
def job(request):
    job = Job(*request.param) if isinstance(request.param, tuple) else Job(request.param)
    chief = job.workers[0]
    chief.initialize(job.session, fresh=True)
    job.aggregator = Aggregator(job.session, chief)
    yield job
    job.session.close()


@pytest.mark.parametrize("job", [1], indirect=True)
def test_a_step_is_the_mean_of_the_first_n_minus_b_changes_and_a_late_one_is_dropped_and_logged(job, caplog):
    caplog.set_level(logging.INFO, logger=syncupdates.__name__)
    job.push(0, 0, 1.0)
    time.sleep(0.2)
    assert job.global_step() == 0  # one change of the two a step needs
    job.push(1, 0, 3.0)
    job.wait_for_step(1)
    w0, w1 = job.session.run(job.weights)
    np.testing.assert_allclose(w0, [-2.0, -2.0])  # weights -= mean of the pseudo-gradients (1 and 3)
    np.testing.assert_allclose(w1, np.full((2, 2), -2.0))
    job.push(2, 0, 100.0)  # worker 2, for step 0, which is gone: dropped
    job.push(0, 1, 1.0)
    job.push(2, 1, 1.0)
    job.wait_for_step(2)
    np.testing.assert_allclose(job.session.run(job.weights[0]), [-3.0, -3.0])
    logged = "sync: step 2 applied; dropped the late change of worker 2 (1 in all)"
    deadline = time.monotonic() + 10  # the chief counts and logs once its run of the step returns, just after
    while logged not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.aggregator.dropped == 1
    assert logged in caplog.text


@pytest.mark.parametrize("job", [0], indirect=True)
def test_without_backups_a_step_waits_for_every_worker(job):
    job.push(0, 0, 1.0)
    job.push(1, 0, 1.0)
    time.sleep(0.3)
    assert job.global_step() == 0
    job.push(2, 0, 4.0)
    job.wait_for_step(1)
    np.testing.assert_allclose(job.session.run(job.weights[0]), [-2.0, -2.0])


@pytest.mark.parametrize("job", [1], indirect=True)
def test_a_worker_waits_for_a_token_of_a_later_step_and_discards_older_ones(job):
    job.push(0, 0, 1.0)
    job.push(1, 0, 1.0)
    job.wait_for_step(1)  # three tokens of step 1
    worker = job.workers[1]
    worker.wait(job.session, 0)  # takes one
    job.push(0, 1, 1.0)
    job.push(2, 1, 1.0)
    job.wait_for_step(2)  # two tokens of step 1 left, three of step 2 behind them
    begin = time.monotonic()
    worker.wait(job.session, 1)  # discards the tokens of step 1 and takes one of step 2
    assert time.monotonic() - begin < syncupdates.WAIT_MS / 1000
    assert len([job.session.run(worker.token) for _ in range(2)]) == 2  # what is left: two tokens of step 2


@pytest.mark.parametrize("job", [1], indirect=True)
def test_a_worker_whose_token_went_to_another_goes_on_once_the_global_step_is_past_its_own(job):
    job.first_step_with_every_token_taken()
    begin = time.monotonic()
    job.workers[2].wait(job.session, 0)
    assert time.monotonic() - begin >= syncupdates.WAIT_MS / 1000  # after one wait for a token


def test_a_chief_that_takes_over_starts_a_new_step_and_releases_every_waiting_worker():
    job = Job(1)  # its chief gone with the change of worker 1 it had taken: step 0 never comes
    job.workers[0].initialize(job.session, fresh=False)
    assert job.global_step() == 1
    job.workers[1].wait(job.session, 0)  # released at once
    np.testing.assert_allclose(job.session.run(job.weights[0]), [0.0, 0.0])  # no change applied
    job.session.close()


@pytest.mark.parametrize("job", [1], indirect=True)
def test_after_the_last_step_the_chief_releases_a_worker_that_labelled_its_change_with_it(job):
    job.first_step_with_every_token_taken()
    job.session.run(job.workers[0].release)  # the job is over at step 1
    job.workers[2].wait(job.session, 1)  # a change labelled with the last step: no step will pass it


@pytest.mark.parametrize("job", [(0, [1, 1, 0])], indirect=True)
def test_a_step_needs_the_workers_flagged_and_one_that_joins_counts_from_the_next_step(job):
    job.push(0, 0, 1.0)
    time.sleep(0.3)
    assert job.global_step() == 0  # two workers flagged, no backup: step 0 needs both
    job.flag(2, 1)  # worker 2 joins while step 0 is in progress: not waited for in it
    job.push(1, 0, 3.0)
    job.wait_for_step(1)
    np.testing.assert_allclose(job.session.run(job.weights[0]), [-2.0, -2.0])
    job.push(0, 1, 1.0)
    job.push(1, 1, 1.0)
    time.sleep(0.3)
    assert job.global_step() == 1  # step 1 needs worker 2 too
    job.push(2, 1, 4.0)
    job.wait_for_step(2)
    np.testing.assert_allclose(job.session.run(job.weights[0]), [-4.0, -4.0])


@pytest.mark.parametrize("job", [(0, [1, 1, 1])], indirect=True)
def test_a_worker_that_leaves_mid_step_is_not_waited_for_and_its_wake_up_is_not_a_dropped_change(job):
    job.push(0, 0, 1.0)
    job.push(1, 0, 3.0)
    time.sleep(0.3)
    assert job.global_step() == 0  # waits for worker 2
    job.flag(2, 0)
    job.session.run(job.workers[2].wake)  # it leaves: the step in progress needs two changes now
    job.wait_for_step(1)
    np.testing.assert_allclose(job.session.run(job.weights[0]), [-2.0, -2.0])  # the mean of the two
    job.push(0, 1, 1.0)
    job.push(1, 1, 1.0)
    job.wait_for_step(2)
    assert job.aggregator.dropped == 0
