"""The Gaussian MLP policy with a learned log standard deviation (state-independent, or gSDE's state-dependent
one: `config.exploration`), and the value network, as TensorFlow variables and ops (for the update).

Each network exists twice over the same weights: here, and as the numpy forward pass that acts
(`policy.NumpyPolicy`, which `Networks.variables` lists the weights for).

Weights are created with `tf.compat.v1.get_variable` inside the caller's graph and device scope, so the
distributed trainer can place them on parameter servers. Orthogonal initialisation (Saxe et al. 2014) with
gain sqrt(2) on hidden layers, 0.01 on the policy head (initial actions near zero, independent of the
observation) and 1 on the value head, as in the PPO baselines; without it (`plain_init`), Keras's
glorot_uniform with zero biases, or PyTorch's nn.Linear default, which SB3 keeps with ortho_init=False.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from agents_operator.trainer.ppo.policy import SDE_EPSILON

if TYPE_CHECKING:
    from agents_operator.config import TrainerConfig

_HIDDEN_GAIN = math.sqrt(2.0)
_POLICY_HEAD_GAIN = 0.01
_VALUE_HEAD_GAIN = 1.0


def _initializers(init: str, fan_in: int, gain: float) -> tuple[Any, Any]:
    """The kernel's and the bias's initializer of a layer with `fan_in` inputs: `init` is "orthogonal" (with
    `gain`) or a `plain_init`."""
    zeros = tf.compat.v1.zeros_initializer()
    if init == "orthogonal":
        return tf.compat.v1.orthogonal_initializer(gain), zeros
    if init == "glorot_uniform":
        return tf.compat.v1.glorot_uniform_initializer(), zeros
    # torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) is uniform in +-1/sqrt(fan_in), the bias too.
    bound = 1.0 / math.sqrt(fan_in)
    return (tf.compat.v1.random_uniform_initializer(-bound, bound),) * 2


def mlp_variables(scope: str, sizes: list[int], output_gain: float, init: str) -> list[tuple[tf.Variable, tf.Variable]]:
    """Weights and biases of a fully connected network with layer widths `sizes` (input first), initialised by
    `init` (`_initializers`)."""
    layers = []
    with tf.compat.v1.variable_scope(scope):
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            gain = output_gain if i == len(sizes) - 2 else _HIDDEN_GAIN
            kernel_init, bias_init = _initializers(init, fan_in, gain)
            kernel = tf.compat.v1.get_variable(f"dense{i}/kernel", [fan_in, fan_out], initializer=kernel_init)
            bias = tf.compat.v1.get_variable(f"dense{i}/bias", [fan_out], initializer=bias_init)
            layers.append((kernel, bias))
    return layers


def hidden_tf(x: tf.Tensor, layers: list, activation: str) -> tf.Tensor:
    """The activations after every one of `layers` (a network's hidden layers)."""
    act = {"tanh": tf.tanh, "relu": tf.nn.relu}[activation]
    for kernel, bias in layers:
        x = act(tf.matmul(x, kernel) + bias)
    return x


def mlp_tf(x: tf.Tensor, layers: list, activation: str) -> tf.Tensor:
    *hidden, (kernel, bias) = layers
    return tf.matmul(hidden_tf(x, hidden, activation), kernel) + bias


def state_dependent_log_std_tf(latent: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """`policy.state_dependent_log_std_np` in TensorFlow; no gradient reaches `latent` through it (gSDE
    without learn_features: the std trains log_std only)."""
    variance = tf.matmul(tf.square(tf.stop_gradient(latent)), tf.exp(2.0 * log_std)) + SDE_EPSILON
    return 0.5 * tf.math.log(variance)


@dataclass
class Networks:
    """TensorFlow variables of the policy and the value function."""

    policy: list[tuple[tf.Variable, tf.Variable]]
    log_std: tf.Variable
    value: list[tuple[tf.Variable, tf.Variable]]

    @classmethod
    def create(cls, obs_dim: int, act_dim: int, config: TrainerConfig) -> Networks:
        init = "orthogonal" if config.orthogonal_init else config.plain_init
        policy = mlp_variables("policy", [obs_dim, *config.policy_layers, act_dim], _POLICY_HEAD_GAIN, init)
        shape = [config.policy_layers[-1], act_dim] if config.exploration == "state_dependent" else [act_dim]
        log_std = tf.compat.v1.get_variable(
            "policy/log_std", shape, initializer=tf.compat.v1.constant_initializer(config.init_log_std)
        )
        value = mlp_variables("value", [obs_dim, *config.value_layers, 1], _VALUE_HEAD_GAIN, init)
        return cls(policy, log_std, value)

    def gaussian(self, x: tf.Tensor, activation: str) -> tuple[tf.Tensor, tf.Tensor]:
        """The policy's means for `x` and its log-std: `log_std` itself, or (batch, act_dim) when it depends on
        the state (as `policy.NumpyPolicy.gaussian`)."""
        if self.log_std.shape.rank == 1:
            return mlp_tf(x, self.policy, activation), self.log_std
        *hidden, (kernel, bias) = self.policy
        latent = hidden_tf(x, hidden, activation)
        return tf.matmul(latent, kernel) + bias, state_dependent_log_std_tf(latent, self.log_std)

    def variables(self) -> list[tf.Variable]:
        """All weights in a fixed order (the order `NumpyPolicy.from_values` expects)."""
        flat = [v for layer in self.policy for v in layer] + [self.log_std]
        return flat + [v for layer in self.value for v in layer]
