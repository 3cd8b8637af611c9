"""Synchronous updates with backup workers (Chen et al., 2016, "Revisiting Distributed Synchronous SGD").

Each step of the shared weights is the mean of the first N - b changes pushed for it, N the workers in the job
(the slots flagged in `distributed.Membership`, at most every slot) and b `backup_workers`; a change that comes
later, for a step already applied, is dropped, counted and logged. With b >= 1 one lost or slow worker does not
stall the job; with b = 0 every step waits for every worker.

- **Elastic.** N is read at each step's start: a worker that joins counts from the next step on. A worker
  that leaves clears its flag and puts a wake-up (label -1, no change) into the queue, so the step in
  progress needs one change fewer at once, and does not wait for a change that will not come.

- A worker labels its change with the global step it read just before it pulled the weights (`step`), puts it
  in a queue on ps 0 (`push`) and waits for a token of a later step (`wait`).
- The chief's thread (`Aggregator`) runs `apply` again and again: in the graph, on ps 0, it takes changes from
  the queue one at a time until N - b of them are for the current step (the others are dropped), applies their
  mean, counts the step and puts a token per worker slot in the token queue.
- A worker discards the tokens of steps it has passed: a dead or slow worker's token goes to the others.
- The chief, once the job has made its last step, releases every worker still waiting (`release`: a token
  past every step), whatever step it labelled its change with.
- A chief that restarts while the ps tasks keep the state (`restart`) starts a new step without a change: the
  changes its predecessor had taken for the step in progress went with it, and the workers that pushed them
  would otherwise wait forever.

SyncReplicasOptimizer does the same with ConditionalAccumulators, but its workers take any token and label
their next change with it; with backups the spare tokens pile up, and workers go on labelling their changes
with steps long gone, all of which are dropped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

log = logging.getLogger(__name__)

WAKE = -1
"""The label of a leaving worker's wake-up: a step's count of changes is looked at again, nothing is applied."""
WAIT_MS = 1000
"""How long a worker waits for a token before it reads the global step (its token may have gone to another)."""
ENDED = (tf.errors.CancelledError, tf.errors.AbortedError, tf.errors.UnavailableError, RuntimeError)
"""What the aggregator's run raises once the session is closed or a ps is lost: its thread ends."""


@dataclass(frozen=True)
class Placement:
    """Who pushes and where the queues live: this worker's index, the worker slots, the changes each update is
    the mean of (`TrainerConfig.aggregated_changes`), and the device of the queues (ps 0 in a cluster; None:
    this process, in a test)."""

    worker: int
    slots: int
    aggregated: int
    device: str | None = "/job:ps/task:0"
    members: tf.Variable | None = None
    """The membership flags (`distributed.Membership.flags`, on ps 0): N is the slots flagged, less the backups.
    None: N is every slot."""

    @property
    def backups(self) -> int:
        return self.slots - self.aggregated


@dataclass(frozen=True)
class SyncUpdates:
    """The ops of synchronous updates: `step` and `label` for a worker's change, `push`, `token`, `wake` (it
    leaves); the chief's `apply` (one step), `restart` and `release`."""

    step: tf.Tensor
    label: tf.Tensor
    push: tf.Operation
    token: tf.Tensor
    wake: tf.Operation
    apply: dict[str, tf.Tensor]
    restart: tf.Operation
    release: tf.Operation
    dropped: tf.Variable
    dropped_ready: tf.Tensor

    @classmethod
    def create(
        cls,
        weights: list[tf.Variable],
        changes: list[tf.Tensor],
        global_step: tf.Variable,
        placement: Placement,
    ) -> SyncUpdates:
        """`changes` are this worker's pseudo-gradients of `weights` (`replicas.changes`)."""
        v1 = tf.compat.v1
        worker, slots = placement.worker, placement.slots
        with v1.device(placement.device) if placement.device else contextlib.nullcontext():
            dtypes = [tf.int64, tf.int32, *(w.dtype.base_dtype for w in weights)]
            shapes = [[], [], *(w.shape for w in weights)]
            queue = v1.FIFOQueue(-1, dtypes, shapes=shapes, shared_name="sync_changes", name="sync_changes")
            tokens = v1.FIFOQueue(-1, [tf.int64], shapes=[[]], shared_name="sync_tokens", name="sync_tokens")
            with v1.variable_scope("sync", reuse=v1.AUTO_REUSE):  # one per graph, on ps 0 (a test's graph: one)
                dropped = v1.get_variable(
                    "dropped", [], tf.int64, v1.zeros_initializer(), trainable=False, collections=[], use_resource=True
                )
            step = global_step.read_value()
            label = v1.placeholder(tf.int64, [], "sync_label")
            push = queue.enqueue([label, tf.constant(worker, tf.int32), *changes])
            token = tokens.dequeue()
            nothing = [tf.zeros(w.shape, w.dtype.base_dtype) for w in weights]
            wake = queue.enqueue([tf.constant(WAKE, tf.int64), tf.constant(worker, tf.int32), *nothing])
            apply = _apply(queue, tokens, weights, global_step, dropped, _need(placement), slots)
            with tf.control_dependencies([global_step.assign_add(1)]):
                new_step = global_step.read_value()
            restart = tokens.enqueue_many([tf.fill([slots], new_step)])
            release = tokens.enqueue_many([tf.fill([slots], tf.constant(np.iinfo(np.int64).max))])
            ready = dropped.is_initialized()
        return cls(step, label, push, token, wake, apply, restart, release, dropped, ready)

    def initialize(self, session: tf.compat.v1.Session, fresh: bool) -> None:
        """The chief, when it joins: the drop counter where a fresh ps has none, and a new step when it took over
        from an earlier chief (`fresh`: it initialised the shared state itself)."""
        if not session.run(self.dropped_ready):
            session.run(self.dropped.initializer)
        if not fresh:
            log.info("sync: a new step, without the changes an earlier chief took for the step in progress")
            session.run(self.restart)

    def wait(self, session: tf.compat.v1.Session, label: int) -> None:
        """Until the step after `label` is applied: a token of a later step, or the global step past it."""
        options = tf.compat.v1.RunOptions(timeout_in_ms=WAIT_MS)
        while True:
            try:
                if session.run(self.token, options=options) > label:
                    return
            except tf.errors.DeadlineExceededError:
                if session.run(self.step) > label:
                    return


def _need(placement: Placement):
    """The changes a step needs now (a function: read when called): the workers flagged less the backups, at
    least one; every slot's less the backups without flags."""
    if placement.members is None:
        return lambda: tf.constant(placement.aggregated)
    flags = placement.members
    return lambda: tf.maximum(1, tf.reduce_sum(flags.read_value()) - placement.backups)


def _apply(queue, tokens, weights, global_step, dropped, need, slots: int) -> dict[str, tf.Tensor]:
    """One step: the mean of the first `need()` changes for the current step (`need()` as of the step's start, or
    lower as soon as a worker leaves), the late ones dropped and counted by worker, wake-ups neither; the step
    counted; a token for every slot."""
    current, at_start = global_step.read_value(), need()

    def body(accepted, late, *sums):
        label, worker, *change = queue.dequeue()
        fresh = tf.equal(label, current)
        sums = [s + tf.where(fresh, c, tf.zeros_like(c)) for s, c in zip(sums, change, strict=True)]
        stale = tf.cast(tf.logical_and(tf.logical_not(fresh), tf.not_equal(label, WAKE)), tf.int32)
        return accepted + tf.cast(fresh, tf.int32), late + stale * tf.one_hot(worker, slots, dtype=tf.int32), *sums

    start = [tf.constant(0), tf.zeros([slots], tf.int32), *(tf.zeros(w.shape, w.dtype.base_dtype) for w in weights)]
    accepted, late, *sums = tf.while_loop(
        lambda accepted, *_: accepted < tf.minimum(at_start, need()),
        body,
        start,
        parallel_iterations=1,
        back_prop=False,
    )
    updates = []
    for weight, total in zip(weights, sums, strict=True):
        with tf.compat.v1.device(weight.device):
            updates.append(weight.assign_sub(total / tf.cast(accepted, total.dtype)))
    with tf.control_dependencies(updates):
        counted_step = global_step.assign_add(1)
    with tf.control_dependencies([counted_step]):
        step = global_step.read_value()
        enqueued = tokens.enqueue_many([tf.fill([slots], step)])
        counted = dropped.assign_add(tf.cast(tf.reduce_sum(late), tf.int64))
    with tf.control_dependencies([enqueued, counted]):
        return {"step": tf.identity(step), "late": tf.identity(late), "dropped": dropped.read_value()}


class Aggregator:
    """The chief's thread that applies step after step (`SyncUpdates.apply`) until its session is closed, and
    logs every change it drops."""

    def __init__(self, session: tf.compat.v1.Session, updates: SyncUpdates):
        self.dropped = 0
        """Changes dropped so far in the job (the count on ps 0), as of the last step applied."""
        self._session, self._apply = session, updates.apply
        self._thread = threading.Thread(target=self._run, name="sync-aggregator", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                out = self._session.run(self._apply)
            except ENDED:
                return
            self.dropped = int(out["dropped"])
            if out["late"].any():
                log.info(
                    "sync: step %d applied; dropped the late change of %s (%d in all)",
                    out["step"],
                    _named(out["late"]),
                    self.dropped,
                )


def _named(late: np.ndarray) -> str:
    """'worker 2' or 'worker 1, worker 2 (2x)': whose changes a step dropped, how many of each."""
    return ", ".join(f"worker {w}" + (f" ({late[w]}x)" if late[w] > 1 else "") for w in np.flatnonzero(late))
