"""The policy and value networks as a numpy forward pass: what acts, in the trainer and in every environment process.

The learner reads the weights of its TensorFlow networks (`networks`) into a `NumpyPolicy` once per update, so
sampling an action costs a few small matmuls instead of a session run per environment step, and the processes
that act (environment workers, env servers) never import TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Layer = tuple[np.ndarray, np.ndarray]  # (weights, bias)


def mlp_np(x: np.ndarray, layers: list[Layer], activation: str) -> np.ndarray:
    """The same network as `networks.mlp_tf`, in numpy."""
    for i, (kernel, bias) in enumerate(layers):
        x = x @ kernel + bias
        if i < len(layers) - 1:
            x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x


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
