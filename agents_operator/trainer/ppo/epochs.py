"""PPO's optimisation phase as TensorFlow ops: `config.epochs` passes of minibatch steps over one iteration's
batch (Schulman et al. 2017, Algorithm 1: "Optimize surrogate L wrt theta, with K epochs and minibatch size
M <= NT").

The step itself (the objective of `objective`, its gradients and the optimizer) is the learner's, which owns
the variables; here is only the order of the minibatches and the loop that runs them in one session run.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo.objective import METRICS

STEP_METRICS = (*METRICS, "grad_norm")
"""What each Adam step of an update measures (its objective's terms and the gradient norm before clipping);
the update logs their means over its minibatches, and its learning rate."""

MinibatchStep = Callable[[dict[str, tf.Tensor]], tuple[tf.Operation, dict[str, tf.Tensor]]]
"""One optimizer step over a minibatch (the fields of `sampling.batch.Batch` by name): its train op and its
metrics (`STEP_METRICS`) by name."""


def minibatch_indices(config: TrainerConfig, batch_size: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """(epochs x minibatches, minibatch_size): the samples of each minibatch of an update, epoch after epoch.

    Each epoch is a fresh permutation of the batch (the order that sorts random 64-bit keys, drawn by a
    stateless op from `seed`, so the order is a function of the seed alone), cut into minibatches; samples
    left over by a batch that is not a multiple of the minibatch size sit out that epoch.
    """
    keys = tf.random.stateless_uniform([config.epochs, batch_size], seed, minval=None, maxval=None, dtype=tf.int64)
    size = config.minibatch_size
    per_epoch = batch_size // size
    orders = tf.argsort(keys, axis=1, stable=True)[:, : per_epoch * size]
    return tf.reshape(orders, [config.epochs * per_epoch, size])


def _per_batch(name: str, value: tf.Tensor) -> bool:
    """Whether a batch field holds one value for the whole batch: a state-independent `log_std`."""
    return name == "log_std" and value.shape.rank == 1


def optimize(
    config: TrainerConfig, step: MinibatchStep, batch: dict[str, tf.Tensor], seed: tf.Tensor
) -> dict[str, tf.Tensor]:
    """Every step of an update (`step(minibatch)`: its train op and its `STEP_METRICS`) in one `tf.while_loop`
    over the batch fed once, `config.epochs` passes of minibatches (`minibatch_indices`); the means of
    `STEP_METRICS` over the minibatches (float64 sums, divided at the end), by name.

    One iteration at a time (`parallel_iterations=1`), and every op of a step waits for the previous
    step's optimizer update: the weights a step reads are those the step before wrote.
    """
    indices = minibatch_indices(config, tf.shape(batch["advantages"])[0], seed)
    steps = tf.shape(indices)[0]

    def body(index: tf.Tensor, totals: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        with tf.control_dependencies([index]):
            rows = indices[index]
            minibatch = {name: v if _per_batch(name, v) else tf.gather(v, rows) for name, v in batch.items()}
            train_op, metrics = step(minibatch)
        with tf.control_dependencies([train_op]):
            return index + 1, {name: total + tf.cast(metrics[name], tf.float64) for name, total in totals.items()}

    zeros = {name: tf.constant(0.0, tf.float64) for name in STEP_METRICS}
    _, totals = tf.compat.v1.while_loop(lambda index, _: index < steps, body, (0, zeros), parallel_iterations=1)
    return {name: total / tf.cast(steps, tf.float64) for name, total in totals.items()}
