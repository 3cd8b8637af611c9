"""The PPO learner: one TensorFlow graph (tf.compat.v1 graph mode) and the session that runs it.

Everything that is state lives in TF variables created by `build_graph`: the network weights, Adam's
slots, the global step, the environment-step and iteration counters, BatchPPO's KL penalty coefficient
and the normaliser statistics. `build_graph` takes a device setter (None locally;
`tf.compat.v1.train.replica_device_setter(...)` in the distributed trainer), so the same graph places its
variables on parameter servers and its ops on the worker. A checkpoint of those variables is the whole
training state.

The session runs once per minibatch and once more per iteration (`finish_iteration`: counters,
normaliser sums, KL penalty, and a read of every weight for the numpy actor). Acting never runs it.
The graph lives in its own `tf.Graph`, which is graph mode whether or not eager execution is enabled in
the process, so tests and tools can build learners side by side.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.normalize import Moments
from agents_operator.trainer.ppo import losses
from agents_operator.trainer.ppo.networks import Networks, NumpyPolicy, mlp_tf


class CheckpointError(Exception):
    """A checkpoint could not be restored (missing, partial or corrupt files, or a different graph)."""


@dataclass
class Batch:
    """One iteration's transitions, flattened to (B, ...): what the update consumes."""

    observations: np.ndarray  # normalised
    actions: np.ndarray  # sampled, before clipping to the action bounds
    log_probs: np.ndarray
    means: np.ndarray  # the acting policy's Gaussian means (for the exact KL)
    log_std: np.ndarray  # the acting policy's log-std, (act_dim,)
    values: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray

    def __len__(self) -> int:
        return len(self.observations)


@dataclass
class LearnerState:
    """What the rest of the trainer needs from the variables, read in one session run."""

    policy: NumpyPolicy
    observation_moments: Moments
    return_moments: Moments
    global_step: int
    env_steps: int
    iterations: int
    kl_beta: float


@dataclass
class _Graph:
    feeds: dict[str, tf.Tensor]
    networks: Networks
    train_op: tf.Operation
    train_metrics: dict[str, tf.Tensor]
    finish_feeds: dict[str, tf.Tensor]
    finish_metrics: dict[str, tf.Tensor]
    state_variables: list[tf.Variable]
    state_after_finish: list[tf.Tensor]


def build_graph(config: TrainerConfig, obs_dim: int, act_dim: int, device_setter: Any = None) -> _Graph:
    """Create all variables and ops of the learner in the current default graph.

    With `device_setter`, variables (weights, optimizer slots, counters, statistics) go where it says
    and ops stay on the worker; that is the only difference between the local and distributed learner.
    """
    device = tf.compat.v1.device(device_setter) if device_setter is not None else contextlib.nullcontext()
    with device:
        return _build(config, obs_dim, act_dim)


def _build(config: TrainerConfig, obs_dim: int, act_dim: int) -> _Graph:
    v1 = tf.compat.v1
    feeds = {
        "observations": v1.placeholder(tf.float32, [None, obs_dim], "observations"),
        "actions": v1.placeholder(tf.float32, [None, act_dim], "actions"),
        "log_probs": v1.placeholder(tf.float32, [None], "old_log_probs"),
        "means": v1.placeholder(tf.float32, [None, act_dim], "old_means"),
        "log_std": v1.placeholder(tf.float32, [act_dim], "old_log_std"),
        "values": v1.placeholder(tf.float32, [None], "old_values"),
        "advantages": v1.placeholder(tf.float32, [None], "advantages"),
        "returns": v1.placeholder(tf.float32, [None], "returns"),
    }
    networks = Networks.create(obs_dim, act_dim, config)
    global_step = v1.train.get_or_create_global_step()

    def counter(name: str, dtype: tf.DType, shape: list[int], init: float = 0) -> tf.Variable:
        initializer = v1.constant_initializer(dtype.as_numpy_dtype(init))
        return v1.get_variable(name, shape, dtype, initializer=initializer, trainable=False, use_resource=True)

    env_steps = counter("env_steps", tf.int64, [])
    iterations = counter("iterations", tf.int64, [])
    kl_beta = counter("kl_beta", tf.float32, [], config.kl_init_penalty)
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

    # --- the PPO objective ------------------------------------------------------------------------------
    mean = mlp_tf(feeds["observations"], networks.policy, config.activation)
    value = mlp_tf(feeds["observations"], networks.value, config.activation)[:, 0]
    log_std = networks.log_std
    new_log_probs = losses.gaussian_log_prob(feeds["actions"], mean, log_std)
    log_ratio = new_log_probs - feeds["log_probs"]
    ratio = tf.exp(log_ratio)
    kl = losses.gaussian_kl(feeds["means"], feeds["log_std"], mean, log_std)
    advantages = feeds["advantages"]
    if config.normalize_advantages:
        adv_mean, adv_var = tf.nn.moments(advantages, axes=[0])
        advantages = (advantages - adv_mean) / (tf.sqrt(adv_var) + 1e-8)
    pg_loss, clipfrac = losses.clipped_surrogate(ratio, advantages, config.clip_range)
    if config.objective == "kl_penalty":
        pg_loss = losses.kl_penalty(
            ratio,
            advantages,
            kl,
            kl_beta,
            config.kl_target,
            config.kl_cutoff_factor,
            config.kl_cutoff_coef,
        )
    v_loss = losses.value_loss(value, feeds["values"], feeds["returns"], config.value_clip)
    entropy = losses.gaussian_entropy(log_std)
    loss = pg_loss + config.value_coef * v_loss - config.entropy_coef * entropy

    learning_rate = tf.constant(config.learning_rate)
    if config.lr_schedule == "linear":
        progress = tf.cast(env_steps.read_value(), tf.float32) / float(config.total_steps)
        learning_rate = learning_rate * tf.maximum(1.0 - progress, 0.0)
    optimizer = v1.train.AdamOptimizer(learning_rate, epsilon=config.adam_epsilon)
    variables = networks.variables()
    gradients = tf.gradients(loss, variables)
    grad_norm = tf.linalg.global_norm(gradients)
    if config.max_grad_norm is not None:
        gradients, _ = tf.clip_by_global_norm(gradients, config.max_grad_norm, use_norm=grad_norm)
    train_op = optimizer.apply_gradients(zip(gradients, variables, strict=True), global_step=global_step)
    train_metrics = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": losses.approx_kl(log_ratio),
        "clipfrac": clipfrac,
        "grad_norm": grad_norm,
        "learning_rate": learning_rate,
    }

    # --- once per iteration -----------------------------------------------------------------------------
    finish_feeds = {
        "env_steps": v1.placeholder(tf.int64, [], "new_env_steps"),
        **{name: v1.placeholder(tf.float64, var.shape, f"new_{name}") for name, var in statistics.items()},
    }
    mean_kl = tf.reduce_mean(kl)
    updates = [
        env_steps.assign_add(finish_feeds["env_steps"]),
        iterations.assign_add(1),
        *(var.assign_add(finish_feeds[name]) for name, var in statistics.items()),
    ]
    if config.objective == "kl_penalty":
        updates.append(kl_beta.assign(losses.adapted_kl_beta(kl_beta, mean_kl, config.kl_target)))
    state_variables = [
        *variables,
        *statistics.values(),
        global_step,
        env_steps,
        iterations,
        kl_beta,
    ]
    with tf.control_dependencies(updates):
        state_after_finish = [var.read_value() for var in state_variables]
    return _Graph(
        feeds,
        networks,
        train_op,
        train_metrics,
        finish_feeds,
        {"kl": mean_kl},
        state_variables,
        state_after_finish,
    )


class Learner:
    """A session over `build_graph`'s graph: update from batches, save and restore the whole state."""

    def __init__(self, config: TrainerConfig, obs_dim: int, act_dim: int, device_setter: Any = None):
        self.config = config
        self.graph = tf.Graph()
        with self.graph.as_default():
            self._g = build_graph(config, obs_dim, act_dim, device_setter)
            self._init = tf.compat.v1.global_variables_initializer()
            self._saver = tf.compat.v1.train.Saver(max_to_keep=None, save_relative_paths=True)
        self.graph.finalize()
        threads = config.threads
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads
        )
        self.session = tf.compat.v1.Session(graph=self.graph, config=session_config)

    def initialize(self) -> LearnerState:
        self.session.run(self._init)
        return self.state()

    def state(self) -> LearnerState:
        return self._unpack(self.session.run(self._g.state_variables))

    def update(self, batch: Batch, rng: np.random.Generator) -> dict[str, float]:
        """`epochs` passes of minibatch Adam steps over `batch`; metrics averaged over all minibatches."""
        size = self.config.minibatch_size
        fetches = [self._g.train_op, self._g.train_metrics]
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(self.config.epochs):
            order = rng.permutation(len(batch))
            for start in range(0, len(batch) - size + 1, size):
                _, metrics = self.session.run(fetches, self._feed(batch, order[start : start + size]))
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + float(value)
                steps += 1
        return {key: total / steps for key, total in totals.items()}

    def finish_iteration(
        self, batch: Batch, env_steps: int, observation_moments: Moments, return_moments: Moments
    ) -> tuple[LearnerState, dict[str, float]]:
        """Count the iteration, push this worker's normaliser sums, adapt the KL penalty, read the state.

        Returns the new state and the exact KL between the acting and the updated policy on `batch`.
        """
        g = self._g
        feed = self._feed(batch, slice(None))
        feed[g.finish_feeds["env_steps"]] = env_steps
        for prefix, moments in [("observation", observation_moments), ("return", return_moments)]:
            feed[g.finish_feeds[f"{prefix}_count"]] = moments.count
            feed[g.finish_feeds[f"{prefix}_sum"]] = moments.sum
            feed[g.finish_feeds[f"{prefix}_sumsq"]] = moments.sumsq
        values, metrics = self.session.run([g.state_after_finish, g.finish_metrics], feed)
        return self._unpack(values), {key: float(value) for key, value in metrics.items()}

    def save(self, prefix: str) -> None:
        with self.graph.as_default():  # the Saver checks the mode at call time
            self._saver.save(self.session, prefix, write_meta_graph=False, write_state=False)

    def restore(self, prefix: str) -> LearnerState:
        try:
            with self.graph.as_default():
                self._saver.restore(self.session, prefix)
        except (tf.errors.OpError, ValueError) as error:
            raise CheckpointError(str(error).strip().splitlines()[0]) from error
        return self.state()

    def close(self) -> None:
        self.session.close()

    def _feed(self, batch: Batch, index: Any) -> dict[tf.Tensor, np.ndarray]:
        feeds = self._g.feeds
        return {
            feeds["observations"]: batch.observations[index],
            feeds["actions"]: batch.actions[index],
            feeds["log_probs"]: batch.log_probs[index],
            feeds["means"]: batch.means[index],
            feeds["log_std"]: batch.log_std,
            feeds["values"]: batch.values[index],
            feeds["advantages"]: batch.advantages[index],
            feeds["returns"]: batch.returns[index],
        }

    def _unpack(self, values: list[np.ndarray]) -> LearnerState:
        num_weights = len(self._g.networks.variables())
        weights, rest = values[:num_weights], values[num_weights:]
        obs_count, obs_sum, obs_sumsq, ret_count, ret_sum, ret_sumsq, global_step, env_steps, iterations, beta = rest
        policy = NumpyPolicy.from_values(weights, len(self._g.networks.policy), self.config.activation)
        return LearnerState(
            policy=policy,
            observation_moments=Moments(float(obs_count), obs_sum, obs_sumsq),
            return_moments=Moments(float(ret_count), np.asarray(ret_sum), np.asarray(ret_sumsq)),
            global_step=int(global_step),
            env_steps=int(env_steps),
            iterations=int(iterations),
            kl_beta=float(beta),
        )


def vector_size(shape: tuple[int, ...]) -> int:
    """The size of a vector observation or action; the MLP policy takes neither images nor scalars."""
    if len(shape) != 1:
        raise ValueError(f"spaces of shape {shape} are not supported: the policy is an MLP over vectors")
    return int(shape[0])
