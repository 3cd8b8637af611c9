"""The state every worker shares (`Shared`: on the ps tasks in a cluster) and how a worker's change reaches it:
one `push` per iteration, which in sync mode goes through a `SyncReplicasOptimizer` that applies the mean of
every worker's change once (`SyncOps` does its session hook's work).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer import distributed
from agents_operator.trainer.ppo.networks import Networks

Scope = Callable[[], AbstractContextManager[Any]]
"""A device scope to build ops under: the shared variables' (`device_setter`) or the worker's."""


def counter(name: str, dtype: tf.DType, shape: list[int], init: float = 0) -> tf.Variable:
    v1 = tf.compat.v1
    initializer = v1.constant_initializer(dtype.as_numpy_dtype(init))
    return v1.get_variable(name, shape, dtype, initializer=initializer, trainable=False, use_resource=True)


@dataclass
class Shared:
    """The run's state, shared by all workers (on the ps tasks in a cluster)."""

    networks: Networks
    counters: dict[str, tf.Variable]  # global_step, env_steps, iterations, kl_beta
    statistics: dict[str, tf.Variable]  # the normalisers' sums: {observation,return}_{count,sum,sumsq}

    @classmethod
    def create(cls, config: TrainerConfig, obs_dim: int, act_dim: int) -> Shared:
        networks = Networks.create(obs_dim, act_dim, config)
        counters = {
            "global_step": tf.compat.v1.train.get_or_create_global_step(),
            "env_steps": counter("env_steps", tf.int64, []),
            "iterations": counter("iterations", tf.int64, []),
            "kl_beta": counter("kl_beta", tf.float32, [], config.kl_init_penalty),
        }
        statistics = {
            name: counter(f"normalizer/{name}", tf.float64, shape)
            for name, shape in [
                ("observation_count", []),
                ("observation_sum", [obs_dim]),
                ("observation_sumsq", [obs_dim]),
                ("return_count", []),
                ("return_sum", []),
                ("return_sumsq", []),
            ]
        }
        return cls(networks, counters, statistics)

    def state(self) -> dict[str, Any]:
        """Every variable `LearnerState` is made of, by name (the weights as one list)."""
        return {"weights": self.networks.variables(), **self.statistics, **self.counters}


def push(
    shared: Shared,
    anchor: list[tf.Variable],
    weights: list[tf.Variable],
    sync_replicas: int,
    shared_scope: Scope,
    local_scope: Scope,
) -> tuple[tf.Operation, tf.compat.v1.train.SyncReplicasOptimizer | None]:
    """The op that applies this worker's change (`weights` less the `anchor` they started from) to the shared
    weights (and counts the update), and in sync mode the optimizer that aggregates every worker's change
    first."""
    shared_weights, global_step = shared.networks.variables(), shared.counters["global_step"]
    with local_scope():
        # The negated change serves as a gradient for plain SGD with step size 1: weights += change.
        changes = zip(anchor, weights, strict=True)
        pseudo_gradients = [a - w for a, w in changes]
    if sync_replicas <= 1:
        updates = (s.assign_sub(g) for s, g in zip(shared_weights, pseudo_gradients, strict=True))
        return tf.group(*updates, global_step.assign_add(1), name="push"), None
    with shared_scope():
        sync_optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(1.0),
            replicas_to_aggregate=sync_replicas,
            total_num_replicas=sync_replicas,
        )
        gradients = zip(pseudo_gradients, shared_weights, strict=True)
        return sync_optimizer.apply_gradients(gradients, global_step=global_step), sync_optimizer


@dataclass
class SyncOps:
    """What `SyncReplicasOptimizer`'s session hook does, for a plain session (no MonitoredSession: its
    hard-coded 30 s recovery wait makes every start-up and recovery slow)."""

    ready: tf.Tensor
    local_init: tf.Operation
    queue_runner: tf.compat.v1.train.QueueRunner | None
    coordinator: tf.train.Coordinator | None = None

    @classmethod
    def create(cls, optimizer: tf.compat.v1.train.SyncReplicasOptimizer, chief: bool) -> SyncOps:
        return cls(
            ready=optimizer.ready_for_local_init_op,
            local_init=optimizer.chief_init_op if chief else optimizer.local_step_init_op,
            queue_runner=optimizer.get_chief_queue_runner() if chief else None,
        )

    def start(self, session: tf.compat.v1.Session, chief: bool) -> None:
        while len(session.run(self.ready)):
            time.sleep(distributed.READY_POLL_SECONDS)
        session.run(self.local_init)
        if chief:
            self.coordinator = tf.train.Coordinator()
            self.queue_runner.create_threads(session, coord=self.coordinator, daemon=True, start=True)
