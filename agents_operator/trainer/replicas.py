"""The state every worker shares (`Shared`: on the ps tasks in a cluster) and how a worker's iteration reaches
it: one `push` of its change (async; in sync mode its `changes` go to `syncupdates`, which applies the mean
of the first changes of each step), then `finish`: the counters, the normaliser sums and the KL penalty.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo import losses
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


@dataclass
class Changes:
    """This worker's change of each weight as a pseudo-gradient (the anchor less the weights, computed on the
    worker): plain SGD with step size 1 on it adds the change."""

    deltas: list[tf.Tensor]
    """The changes; all zero when `finite` is false, so that a NaN or inf of one worker never reaches the shared
    weights, from which every worker would then act and learn."""
    finite: tf.Tensor
    """bool: every change was finite (read it in the run that pushes `deltas`: the same values)."""


def changes(anchor: list[tf.Variable], weights: list[tf.Variable], local_scope: Scope) -> Changes:
    """The change of `weights` since `anchor`, pushed as no change when any of it is not finite."""
    with local_scope():
        raw = [a - w for a, w in zip(anchor, weights, strict=True)]
        finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(delta)) for delta in raw]))
        return Changes([tf.where(finite, delta, tf.zeros_like(delta)) for delta in raw], finite)


@dataclass
class Push:
    """An async push: the op, and the staleness it read (fetch both in one run)."""

    op: tf.Operation
    staleness: tf.Tensor
    """int64: the updates other workers applied to the shared weights between this worker's pull and its push."""


def push(shared: Shared, pseudo_gradients: list[tf.Tensor], pulled_step: tf.Variable) -> Push:
    """The op that adds this worker's change to the shared weights at once and counts the update (async), and
    its staleness: the global steps counted since this worker's pull read `pulled_step`."""
    shared_weights, global_step = shared.networks.variables(), shared.counters["global_step"]
    staleness = global_step.read_value() - pulled_step.read_value()
    with tf.control_dependencies([staleness]):
        updates = [s.assign_sub(g) for s, g in zip(shared_weights, pseudo_gradients, strict=True)]
        counted = global_step.assign_add(1)
    return Push(tf.group(*updates, counted, name="push"), staleness)


def finish(
    config: TrainerConfig, shared: Shared, kl: tf.Tensor
) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor], dict[str, Any]]:
    """The end of an iteration: its placeholders (env_steps and the normalisers' sums, by name), its metrics
    (the mean KL) and the state read after it counted the iteration, added the sums and adapted the KL
    penalty."""
    v1 = tf.compat.v1
    feeds = {
        "env_steps": v1.placeholder(tf.int64, [], "new_env_steps"),
        **{name: v1.placeholder(tf.float64, var.shape, f"new_{name}") for name, var in shared.statistics.items()},
    }
    counters = shared.counters
    mean_kl = tf.reduce_mean(kl)
    updates = [
        counters["env_steps"].assign_add(feeds["env_steps"]),
        counters["iterations"].assign_add(1),
        *(var.assign_add(feeds[name]) for name, var in shared.statistics.items()),
    ]
    if config.objective == "kl_penalty":
        beta = counters["kl_beta"]
        updates.append(beta.assign(losses.adapted_kl_beta(beta, mean_kl, config.kl_target)))
    with tf.control_dependencies(updates):
        state = {name: _read(variables) for name, variables in shared.state().items()}
    return feeds, {"kl": mean_kl}, state


def _read(variables: tf.Variable | list[tf.Variable]) -> tf.Tensor | list[tf.Tensor]:
    if isinstance(variables, list):
        return [var.read_value() for var in variables]
    return variables.read_value()
