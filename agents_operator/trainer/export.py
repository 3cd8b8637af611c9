"""Export a policy as a TensorFlow SavedModel that acts exactly as the trainer evaluates it.

The SavedModel (`agents_operator.exported` describes its signatures and `policy.json`) holds the policy and
value networks' weights, the log standard deviation, the observation statistics and the action bounds as
variables, and computes what the numpy actor (`ppo.policy.NumpyPolicy`) computes, in the same arithmetic:
the normalisation in float32, the networks in float64 on the float32 weights, one rounding to float32 at the
output, then the clip to the action bounds. So its `act` gives the trainer's deterministic actions bit for bit
(tests/trainer/test_export.py), in TensorFlow Serving as in `agents_operator.exported.policy.load`.

`read` gives the exported policy back as the numpy actor, for env servers (which run no TensorFlow): they
receive its weights as they receive the trainer's.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import numpy as np
import tensorflow as tf

from agents_operator import exported, topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.learner import Learner, LearnerState, vector_size
from agents_operator.trainer.ppo import networks
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.policy import Layer, NumpyPolicy

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_ACTIVATIONS = {"tanh": tf.tanh, "relu": tf.nn.relu}


class Episodes(Protocol):
    """Where an export's evaluation plays: a `BatchEnv`'s worker processes or a `RemoteBatchEnv`'s first env
    server."""

    observation_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    action_low: np.ndarray
    action_high: np.ndarray

    def run_episodes(
        self, policy: NumpyPolicy, observations: Normalizer, episodes: int, seed: int
    ) -> tuple[list[float], list[int]]: ...


def _variables(layers: list[Layer]) -> list[tf.Variable]:
    """Kernel, bias, kernel, bias, ... in float64 (exact), as the numpy actor multiplies them."""
    return [tf.Variable(array.astype(np.float64), trainable=False) for layer in layers for array in layer]


class _PolicyModule(tf.Module):
    """The variables and the two signature functions of the SavedModel."""

    def __init__(self, policy: NumpyPolicy, observations: Normalizer, low: np.ndarray, high: np.ndarray):
        super().__init__(name="policy")
        self.policy_weights = _variables(policy.policy)
        self.log_std = tf.Variable(policy.log_std.astype(np.float32), trainable=False)
        self.value_weights = _variables(policy.value)
        self.activation = tf.Variable(policy.activation, trainable=False)
        moments = observations.shared
        self.observation_moments = [
            tf.Variable(np.asarray(value, np.float64), trainable=False)
            for value in (moments.count, moments.sum, moments.sumsq)
        ]
        self.observation_mean = tf.Variable(observations.mean, trainable=False)
        self.observation_std = tf.Variable(observations.std, trainable=False)
        self.normalize_observations = tf.Variable(observations.enabled, trainable=False)
        self.clip_observations = tf.Variable(np.float32(observations.clip), trainable=False)
        self.action_low = tf.Variable(np.asarray(low, np.float32), trainable=False)
        self.action_high = tf.Variable(np.asarray(high, np.float32), trainable=False)
        self._activation, self._normalize = policy.activation, observations.enabled
        spec = tf.TensorSpec([None, observations.mean.shape[0]], tf.float32, name=exported.OBSERVATIONS)
        self.act = tf.function(self._act, input_signature=[spec])
        self.sample = tf.function(self._sample, input_signature=[spec, tf.TensorSpec([], tf.int64, exported.SEED)])

    def _hidden(self, observations: tf.Tensor) -> tf.Tensor:
        """The policy's last hidden layer in float64 for `observations` normalised as `Normalizer.normalize`
        does, operation for operation."""
        x = observations
        if self._normalize:
            clip = self.clip_observations
            x = tf.clip_by_value((x - self.observation_mean) / self.observation_std, -clip, clip)
        x = tf.cast(x, tf.float64)
        for kernel, bias in self._layers()[:-1]:
            x = _ACTIVATIONS[self._activation](tf.matmul(x, kernel) + bias)
        return x

    def _layers(self) -> list[tuple[tf.Variable, tf.Variable]]:
        return list(zip(self.policy_weights[::2], self.policy_weights[1::2], strict=True))

    def _mean(self, hidden: tf.Tensor) -> tf.Tensor:
        """`NumpyPolicy.mean` from the last hidden layer (`_hidden`)."""
        kernel, bias = self._layers()[-1]
        return tf.cast(tf.matmul(hidden, kernel) + bias, tf.float32)

    def _act(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        actions = tf.clip_by_value(self._mean(self._hidden(observations)), self.action_low, self.action_high)
        return {exported.ACTIONS: actions}

    def _sample(self, observations: tf.Tensor, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """a = mean + std * noise and log N(a | mean, std^2), as `NumpyPolicy.act` and `gaussian_log_prob_np`
        (a state-dependent std from the float64 hidden layer, rounded to float32)."""
        hidden = self._hidden(observations)
        mean = self._mean(hidden)
        log_std = self.log_std
        if log_std.shape.rank == 2:
            log_std = networks.state_dependent_log_std_tf(tf.cast(hidden, tf.float32), log_std)
        noise = tf.random.stateless_normal(tf.shape(mean), tf.stack([seed, tf.constant(0, tf.int64)]))
        per_dim = -0.5 * tf.square(noise) - log_std - _HALF_LOG_2PI
        return {
            exported.ACTIONS: mean + tf.exp(log_std) * noise,
            exported.LOG_PROBS: tf.reduce_sum(per_dim, axis=-1),
        }


def write(
    out: Path,
    policy: NumpyPolicy,
    observations: Normalizer,
    low: np.ndarray,
    high: np.ndarray,
    metadata: exported.Metadata,
    replace: bool = False,
) -> Path:
    """Write the SavedModel and its `policy.json` to the directory `out`, whole or not at all.

    Everything is written into a temporary directory beside `out`, then renamed into place. An existing
    `out` is an ExportError unless `replace`; then it is replaced only once the new export is complete.
    """
    out = Path(out)
    if out.exists() and not replace:
        raise exported.ExportError(f"{out}: already exists; choose another directory or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        module = _PolicyModule(policy, observations, low, high)
        signatures = {
            exported.ACT: module.act.get_concrete_function(),
            exported.SAMPLE: module.sample.get_concrete_function(),
        }
        tf.saved_model.save(module, str(tmp), signatures=signatures)
        (tmp / exported.METADATA).write_text(metadata.to_json())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.rename(out, old / out.name)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read(directory: Path) -> tuple[NumpyPolicy, Normalizer, exported.Metadata]:
    """The exported policy in `directory` as the trainer's numpy actor and normaliser (the same values)."""
    metadata = exported.read_metadata(directory)
    model = tf.saved_model.load(str(directory))
    weights = [w.numpy().astype(np.float32) for w in (*model.policy_weights, model.log_std, *model.value_weights)]
    activation = model.activation.numpy().decode()
    policy = NumpyPolicy.from_values(weights, len(model.policy_weights) // 2, activation)
    clip, enabled = float(model.clip_observations.numpy()), bool(model.normalize_observations.numpy())
    observations = Normalizer(tuple(metadata.observation_shape), clip, enabled)
    count, total, squares = (v.numpy() for v in model.observation_moments)
    observations.shared = Moments(float(count), total, squares)
    return policy, observations, metadata


def acting_observations(config: TrainerConfig, state: LearnerState, shape: tuple[int, ...]) -> Normalizer:
    """The normaliser the policy of `state` acts with: the run's settings and the state's statistics."""
    observations = Normalizer(shape, config.clip_observations, config.normalize_observations)
    observations.shared = state.observation_moments
    return observations


def evaluation(returns: list[float], seed: int) -> exported.Evaluation:
    """The record of an evaluation whose episode i, seeded `seed` + i, returned `returns[i]`."""
    return exported.Evaluation(len(returns), seed, float(np.mean(returns)), [float(r) for r in returns])


def export_state(
    out: Path,
    config: TrainerConfig,
    state: LearnerState,
    checkpoint: Path,
    source: Episodes,
    preset: str | None,
    replace: bool = False,
    evaluated: exported.Evaluation | None = None,
) -> exported.Metadata:
    """Export the policy of `state` (restored from `checkpoint`) with its evaluation as the trainer evaluates
    (`eval_episodes` episodes on the evaluation seeds): `evaluated`, or else played on `source` now."""
    observations = acting_observations(config, state, source.observation_shape)
    if evaluated is None:
        seed = config.seed + topology.EVALUATION_SEED_OFFSET
        returns, _ = source.run_episodes(state.policy, observations, config.eval_episodes, seed)
        evaluated = evaluation(returns, seed)
    if not np.isfinite(evaluated.returns).all():
        raise exported.ExportError(
            f"{checkpoint.name} not exported: its evaluation returned {evaluated.returns} (the policy's weights or "
            "the environment's rewards are not finite); the checkpoint is kept"
        )
    metadata = exported.Metadata(
        env_id=config.env_id,
        max_episode_steps=config.max_episode_steps,
        observation_shape=list(source.observation_shape),
        action_shape=list(source.action_shape),
        action_low=[float(x) for x in source.action_low],
        action_high=[float(x) for x in source.action_high],
        preset=preset,
        checkpoint=checkpoint.name,
        global_step=state.global_step,
        env_steps=state.env_steps,
        evaluation=evaluated,
    )
    write(out, state.policy, observations, source.action_low, source.action_high, metadata, replace)
    return metadata


def export_run(
    config: TrainerConfig, logdir: Path, out: Path, number: int | None, preset: str | None, replace: bool = False
) -> exported.Metadata:
    """Export checkpoint `number` of the run in `logdir` (its latest when None) to `out` (see `write`)."""
    found = checkpoints.list_checkpoints(logdir)
    if not found:
        raise exported.ExportError(f"no checkpoint in {checkpoints.directory(logdir)}")
    chosen = [path for path in found if number is None or checkpoints.number(path) == number]
    if not chosen:
        numbers = ", ".join(str(checkpoints.number(path)) for path in found) or "none"
        raise exported.ExportError(f"--checkpoint {number}: no such checkpoint in {logdir} (there are: {numbers})")
    with BatchEnv.for_episodes(config.env_id, config.max_episode_steps, config.eval_episodes) as source:
        learner = Learner(config, vector_size(source.observation_shape), vector_size(source.action_shape))
        try:
            state = checkpoints.restore(learner, chosen[-1])
        finally:
            learner.close()
        return export_state(out, config, state, chosen[-1], source, preset, replace)
