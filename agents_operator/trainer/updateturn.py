"""Async updates in turn (config `async_updates: in_turn`): one async worker of a cluster updates at a time.

Why: async workers whose updates overlap all start from the same shared weights and all add their change, each
bounded by PPO's clip around weights that the others' changes have since moved (Hogwild's sum). In turn, a
worker takes the turn before it pulls and gives it back after its push, so every update starts from the
weights that every earlier push left, as one worker's updates do, while the other workers sample. The price: the
job updates one worker at a time, so turns queue once (workers - 1) updates take longer than a rollout
(docs/scaling.md).

The turn is a token in a queue on ps 0 (by `shared_name`, every worker's graph names the same queue), and
beside it the slot of the worker that holds it. A turn is never lost for good:
- the chief puts the token in when it joins a ps that has none while nobody holds the turn (a fresh ps);
- a worker (the chief too) that joins again gives back a turn it held when it went away;
- the chief, after waiting `POLL_SECONDS` for the turn, puts a new token in when the worker holding it no
  longer listens.
The queue holds a token per worker, so giving a turn back never blocks, even where a recovery put a second
token in (the holder's slot is written just after the token is taken: in that moment the chief may take the
turn for lost); at worst two updates overlap for a while, as they would without turns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from agents_operator.trainer import distributed

log = logging.getLogger(__name__)

NOBODY = -1  # the holder's slot while the turn is free
POLL_SECONDS = 30.0
"""How long the chief waits for the turn before it checks that its holder still listens: far longer than an
update, so that a slow holder is not taken for a lost one, and short beside a restart."""


@dataclass
class UpdateTurn:
    """The ops of the turn, built in one worker's graph (`create`)."""

    slot: int
    take_op: tf.Operation  # take the token (blocks while there is none), then write this worker's slot
    give_op: tf.Operation  # write NOBODY, then put the token back
    put_token: tf.Operation
    tokens: tf.Tensor
    holder: tf.Variable
    initialized: tf.Tensor  # whether ps 0 has the holder's slot yet

    @classmethod
    def create(cls, cluster: distributed.Cluster) -> UpdateTurn:
        v1, slot = tf.compat.v1, cluster.tf_config.task_index
        with v1.device("/job:ps/task:0"):
            queue = v1.FIFOQueue(
                cluster.num_workers, tf.int32, shapes=[[]], shared_name="update_turn", name="update_turn"
            )
            holder = v1.get_variable(
                "update_turn_holder",
                [],
                tf.int32,
                v1.constant_initializer(NOBODY),
                trainable=False,
                collections=[],
                use_resource=True,
            )
            with tf.control_dependencies([queue.dequeue()]):
                take = holder.assign(slot).op
            with tf.control_dependencies([holder.assign(NOBODY)]):
                give = queue.enqueue(slot)
            put_token = queue.enqueue(slot)
            tokens = queue.size()
            initialized = v1.is_variable_initialized(holder)
        return cls(slot, take, give, put_token, tokens, holder, initialized)

    def join(self, session: tf.compat.v1.Session, is_chief: bool, gone: Callable[[int], bool]) -> None:
        """At a worker's (re)join: make the holder's slot on a fresh ps (the chief), give back a turn this worker
        held before it went away, and (the chief) put the token in where there is none and no live worker
        holds the turn. `gone(slot)`: that worker no longer listens."""
        if is_chief and not session.run(self.initialized):
            session.run(self.holder.initializer)
        while not session.run(self.initialized):  # a worker other than the chief may join first
            time.sleep(distributed.READY_POLL_SECONDS)
        holder, tokens = session.run([self.holder, self.tokens])
        if holder == self.slot and not tokens:  # with a token, the chief has made a new turn meanwhile
            log.info("giving back the turn to update that this worker held before it went away")
            session.run(self.give_op)
        elif is_chief:
            self._recover(session, gone)

    def take(self, session: tf.compat.v1.Session, is_chief: bool, gone: Callable[[int], bool]) -> float:
        """Wait for the turn and take it; the seconds waited. The chief recovers a turn lost with its holder."""
        begin = time.perf_counter()
        options = tf.compat.v1.RunOptions(timeout_in_ms=int(POLL_SECONDS * 1000))
        while True:
            try:
                session.run(self.take_op, options=options)
                return time.perf_counter() - begin
            except tf.errors.DeadlineExceededError:
                if is_chief:
                    self._recover(session, gone)

    def give(self, session: tf.compat.v1.Session) -> None:
        session.run(self.give_op)

    def _recover(self, session: tf.compat.v1.Session, gone: Callable[[int], bool]) -> None:
        """The chief's: a new token where there is none and nobody, or a worker that no longer listens, holds the
        turn (nobody: a fresh ps)."""
        tokens, holder = session.run([self.tokens, self.holder])
        if tokens or (holder != NOBODY and not gone(int(holder))):
            return
        if holder != NOBODY:
            log.warning("worker %d held the turn to update and no longer listens: a new turn", holder)
        session.run(self.put_token)
