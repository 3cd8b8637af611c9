"""The policy and value networks as a numpy forward pass: what acts, in the trainer and in every environment process.

The learner reads the weights of its TensorFlow networks (`networks`) into a `NumpyPolicy` once per update, so
sampling an action costs a few small matmuls instead of a session run per environment step, and the processes
that act (environment workers, env servers) never import TensorFlow.

The deterministic action (`NumpyPolicy.mean`: evaluations, videos) is computed in float64 on the float32 weights
and rounded to float32 once, at the output. In float32, every implementation rounds the sums of a matrix
product in its own order (OpenBLAS differs from itself between one row and many, TensorFlow's kernels differ
from both) and approximates tanh its own way, so two correct forward passes disagree in the last bits of most
outputs. In float64 they differ by about 1e-16 relative, and the float32 results agree unless a value falls
that close to a rounding boundary: an exported policy (`trainer.export`, in TensorFlow) acts bit for bit as
the trainer evaluates (tests/trainer/test_export.py). Sampling (`act`) keeps the float32 forward pass, which
costs half as much where acting is a large share of a step (Pendulum); its Gaussian means may differ from
`mean` in the last bits, which changes nothing a rollout is used for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

Layer = tuple[np.ndarray, np.ndarray]  # (weights, bias)


SDE_EPSILON = 1e-6
"""Added to a state-dependent variance (as Stable-Baselines3's gSDE does), so that its log stays finite where
the policy's last hidden layer is all zero."""


def hidden_np(x: np.ndarray, layers: list[Layer], activation: str) -> np.ndarray:
    """The activations after every one of `layers` (a network's hidden layers)."""
    for kernel, bias in layers:
        x = x @ kernel + bias
        x = np.tanh(x) if activation == "tanh" else np.maximum(x, 0.0)
    return x


def mlp_np(x: np.ndarray, layers: list[Layer], activation: str) -> np.ndarray:
    """The same network as `networks.mlp_tf`, in numpy."""
    *hidden, (kernel, bias) = layers
    return hidden_np(x, hidden, activation) @ kernel + bias


def state_dependent_log_std_np(latent: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """gSDE's log-std per sample and action dimension: log sqrt(latent^2 exp(2 log_std) + SDE_EPSILON), with
    `latent` (rows, L) the policy's last hidden layer and `log_std` (L, act_dim)."""
    return (0.5 * np.log(np.square(latent) @ np.exp(2.0 * log_std) + SDE_EPSILON)).astype(np.float32)


def mlp_rounded_once(x: np.ndarray, layers64: list[Layer], activation: str) -> np.ndarray:
    """`mlp_np` in float64 with float64 `layers64`, rounded to float32 at the output (see the module docstring)."""
    return mlp_np(np.asarray(x, np.float64), layers64, activation).astype(np.float32)


@dataclass
class NumpyPolicy:
    """A snapshot of the networks' weights that acts without TensorFlow.

    Its `log_std` is (act_dim,) for a state-independent Gaussian, or (L, act_dim) for a state-dependent one
    (`config.exploration`), L the width of the policy's last hidden layer: the shape says which.
    """

    policy: list[Layer]
    log_std: np.ndarray
    value: list[Layer]
    activation: str
    _policy64: list[Layer] = field(init=False, repr=False, compare=False)
    """The policy's weights in float64 (exactly: every float32 is a float64), for `mean`."""

    def __post_init__(self) -> None:
        self._policy64 = [(kernel.astype(np.float64), bias.astype(np.float64)) for kernel, bias in self.policy]

    @classmethod
    def from_values(cls, values: list[np.ndarray], num_policy_layers: int, activation: str) -> NumpyPolicy:
        """Inverse of `Networks.variables` applied to the values read from a session."""
        split = 2 * num_policy_layers
        policy = list(zip(values[:split:2], values[1:split:2], strict=True))
        rest = values[split + 1 :]
        value = list(zip(rest[::2], rest[1::2], strict=True))
        return cls(policy, values[split], value, activation)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        """The deterministic action (the Gaussian's mean, before clipping to the action bounds), float32,
        rounded once from float64 (see the module docstring)."""
        return mlp_rounded_once(obs, self._policy64, self.activation)

    @property
    def state_dependent(self) -> bool:
        return self.log_std.ndim == 2

    def gaussian(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Gaussian's means for `obs` and its log-std: `log_std` itself, or (rows, act_dim) when it depends
        on the state (float32 forward pass)."""
        if not self.state_dependent:
            return mlp_np(obs, self.policy, self.activation), self.log_std
        *hidden, (kernel, bias) = self.policy
        latent = hidden_np(obs, hidden, self.activation)
        return latent @ kernel + bias, state_dependent_log_std_np(latent, self.log_std)

    def log_prob(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(actions | obs) under this policy, float32 (the forward pass of `act`)."""
        mean, log_std = self.gaussian(obs)
        return gaussian_log_prob_np((actions - mean) * np.exp(-log_std), log_std)

    def value_of(self, obs: np.ndarray) -> np.ndarray:
        return mlp_np(obs, self.value, self.activation)[..., 0]

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions a ~ N(mean(obs), exp(log_std)^2) drawn as mean(obs) + exp(log_std) * noise from standard
        normal `noise`, their log-probabilities and the Gaussian means. Samplers draw a rollout's noise up
        front, so that where and in which order its rows are acted on does not change the actions.

        State-dependent, this is gSDE with new exploration weights every step: with theta (L, act_dim) drawn
        from N(0, exp(log_std)^2), the noise latent @ theta is N(0, latent^2 exp(2 log_std)) in each action
        dimension, independently, which is what std(obs) * noise draws."""
        mean, log_std = self.gaussian(obs)
        actions = mean + np.exp(log_std) * noise
        return actions, gaussian_log_prob_np(noise, log_std), mean

    def act_held(self, obs: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `act`, with gSDE's exploration weights held over several steps (`envs.noise`): the noise is
        latent @ (exp(log_std) * weights[i]) for row i, `weights` (rows, L, act_dim) standard normal. Its
        marginal is act's Gaussian (up to gSDE's 1e-6 in the variance), and the log-probabilities are the
        actions' under it."""
        *hidden, (kernel, bias) = self.policy
        latent = hidden_np(obs, hidden, self.activation)
        mean = latent @ kernel + bias
        log_std = state_dependent_log_std_np(latent, self.log_std)
        exploration = np.einsum("nl,nlk->nk", latent, np.exp(self.log_std) * weights).astype(np.float32)
        return mean + exploration, gaussian_log_prob_np(exploration * np.exp(-log_std), log_std), mean


def gaussian_log_prob_np(noise: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise | mean, std^2), summed over action dimensions."""
    per_dim = -0.5 * np.square(noise) - log_std - 0.5 * math.log(2.0 * math.pi)
    return per_dim.sum(axis=-1).astype(np.float32)
