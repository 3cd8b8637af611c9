"""The Gaussian MLP policy with a learned, state-independent log standard deviation, and the value network.

Each network exists twice over the same weights: as TensorFlow variables and ops (for the update) and as
a numpy forward pass (for acting). The learner reads the weights into numpy once per update, so sampling
an action costs a few small matmuls instead of a session run per environment step.

Weights are created with `tf.compat.v1.get_variable` inside the caller's graph and device scope, so the
distributed trainer can place them on parameter servers. Orthogonal initialisation (Saxe et al. 2014) with
gain sqrt(2) on hidden layers, 0.01 on the policy head (initial actions near zero, independent of the
observation) and 1 on the value head, as in the PPO baselines.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

    from agents_operator.config import TrainerConfig

Layer = tuple[np.ndarray, np.ndarray]  # (weights, bias)

_HIDDEN_GAIN = math.sqrt(2.0)
_POLICY_HEAD_GAIN = 0.01
_VALUE_HEAD_GAIN = 1.0


def mlp_variables(
    scope: str, sizes: list[int], output_gain: float, orthogonal: bool
) -> list[tuple[tf.Variable, tf.Variable]]:
    """Weights and biases of a fully connected network with layer widths `sizes` (input first)."""
    import tensorflow as tf

    layers = []
    with tf.compat.v1.variable_scope(scope):
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            gain = output_gain if i == len(sizes) - 2 else _HIDDEN_GAIN
            init = (
                tf.compat.v1.orthogonal_initializer(gain) if orthogonal else tf.compat.v1.glorot_uniform_initializer()
            )
            kernel = tf.compat.v1.get_variable(f"dense{i}/kernel", [fan_in, fan_out], initializer=init)
            bias = tf.compat.v1.get_variable(f"dense{i}/bias", [fan_out], initializer=tf.compat.v1.zeros_initializer())
            layers.append((kernel, bias))
    return layers


def mlp_tf(x: tf.Tensor, layers: list, activation: str) -> tf.Tensor:
    import tensorflow as tf

    act = {"tanh": tf.tanh, "relu": tf.nn.relu}[activation]
    for i, (kernel, bias) in enumerate(layers):
        x = tf.matmul(x, kernel) + bias
        if i < len(layers) - 1:
            x = act(x)
    return x


def mlp_np(x: np.ndarray, layers: list[Layer], activation: str) -> np.ndarray:
    """The same network as `mlp_tf`, in numpy."""
    for i, (kernel, bias) in enumerate(layers):
        x = x @ kernel + bias
        if i < len(layers) - 1:
            x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x


@dataclass
class Networks:
    """TensorFlow variables of the policy and the value function."""

    policy: list[tuple[tf.Variable, tf.Variable]]
    log_std: tf.Variable
    value: list[tuple[tf.Variable, tf.Variable]]

    @classmethod
    def create(cls, obs_dim: int, act_dim: int, config: TrainerConfig) -> Networks:
        import tensorflow as tf

        policy = mlp_variables(
            "policy", [obs_dim, *config.policy_layers, act_dim], _POLICY_HEAD_GAIN, config.orthogonal_init
        )
        log_std = tf.compat.v1.get_variable(
            "policy/log_std", [act_dim], initializer=tf.compat.v1.constant_initializer(config.init_log_std)
        )
        value = mlp_variables("value", [obs_dim, *config.value_layers, 1], _VALUE_HEAD_GAIN, config.orthogonal_init)
        return cls(policy, log_std, value)

    def variables(self) -> list[tf.Variable]:
        """All weights in a fixed order (the order `NumpyPolicy.from_values` expects)."""
        flat = [v for layer in self.policy for v in layer] + [self.log_std]
        return flat + [v for layer in self.value for v in layer]


@dataclass
class NumpyPolicy:
    """A snapshot of the networks' weights that acts without TensorFlow."""

    policy: list[Layer]
    log_std: np.ndarray
    value: list[Layer]
    activation: str

    @classmethod
    def from_values(cls, values: list[np.ndarray], num_policy_layers: int, activation: str) -> NumpyPolicy:
        """Inverse of `Networks.variables` applied to the values read from a session."""
        split = 2 * num_policy_layers
        policy = list(zip(values[:split:2], values[1:split:2], strict=True))
        rest = values[split + 1 :]
        value = list(zip(rest[::2], rest[1::2], strict=True))
        return cls(policy, values[split], value, activation)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action (the Gaussian's mean, before clipping to the action bounds)."""
        return mlp_np(obs, self.policy, self.activation)

    def value_of(self, obs: np.ndarray) -> np.ndarray:
        return mlp_np(obs, self.value, self.activation)[..., 0]

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions a ~ N(mean(obs), exp(log_std)^2) drawn as mean(obs) + exp(log_std) * noise from standard
        normal `noise`, their log-probabilities and the Gaussian means. Samplers draw a rollout's noise up
        front, so that where and in which order its rows are acted on does not change the actions."""
        mean = self.mean(obs)
        actions = mean + np.exp(self.log_std) * noise
        return actions, gaussian_log_prob_np(noise, self.log_std), mean


def gaussian_log_prob_np(noise: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise | mean, std^2), summed over action dimensions."""
    per_dim = -0.5 * np.square(noise) - log_std - 0.5 * math.log(2.0 * math.pi)
    return per_dim.sum(axis=-1).astype(np.float32)
