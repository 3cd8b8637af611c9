"""A rollout's exploration noise, drawn up front by the trainer (`sampling.samplers`), so that where and in which
order the environments are acted on never changes the actions (`envs.rollout.run`).

Two kinds, by the config's `exploration_hold`:

- per step (hold 1): standard normal draws, (steps, n, act_dim); a = mean(s) + std(s) * draw, for both
  explorations (state-dependent, that is gSDE with new exploration weights every step, `NumpyPolicy.act`);
- held exploration weights (hold > 1, state-dependent exploration only): standard normal matrices,
  (periods, n, L, act_dim), one for every `hold` steps of each environment, the first at the rollout's start,
  as gSDE's sde_sample_freq resamples them (Raffin et al. 2021); a = mean(s) + phi(s) @ (exp(log_std) * W),
  phi the policy's last hidden layer (`NumpyPolicy.act_held`). Within a period the noise changes with the
  state only, which explores with smooth, correlated actions; each action's marginal is the same Gaussian,
  so PPO's log-probabilities are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents_operator.trainer.ppo.policy import NumpyPolicy


@dataclass(frozen=True)
class Noise:
    """`draws[p]` is what acts at steps p * hold to (p + 1) * hold - 1 of `steps`; its second axis is the
    environment. Per step (3 axes), hold is 1."""

    draws: np.ndarray
    steps: int
    hold: int = 1

    def __post_init__(self) -> None:
        if self.draws.ndim not in (3, 4):
            raise ValueError(f"noise draws must have 3 or 4 axes, got shape {self.draws.shape}")
        if self.steps < 1 or self.hold < 1 or (self.draws.ndim == 3 and self.hold != 1):
            raise ValueError(f"noise of {self.steps} steps held {self.hold}: both must be at least 1, per step 1")
        if len(self.draws) != math.ceil(self.steps / self.hold):
            raise ValueError(
                f"noise of {self.steps} steps held {self.hold} needs {math.ceil(self.steps / self.hold)} draws, "
                f"got {len(self.draws)}"
            )

    @classmethod
    def per_step(cls, draws: np.ndarray) -> Noise:
        """Standard normal noise (steps, n, act_dim)."""
        return cls(draws, len(draws))

    @classmethod
    def draw(cls, rng: np.random.Generator, steps: int, num_envs: int, log_std: np.ndarray, hold: int) -> Noise:
        """A rollout's noise from `rng`, for a policy whose log-std parameter is `log_std` ((act_dim,), or
        gSDE's (L, act_dim)): per step when `hold` is 1, else held exploration weights."""
        if hold == 1:
            return cls.per_step(rng.standard_normal((steps, num_envs, log_std.shape[-1]), dtype=np.float32))
        shape = (math.ceil(steps / hold), num_envs, *log_std.shape)
        return cls(rng.standard_normal(shape, dtype=np.float32), steps, hold)

    @property
    def held(self) -> bool:
        return self.draws.ndim == 4

    @property
    def num_envs(self) -> int:
        return self.draws.shape[1]

    @property
    def action_dim(self) -> int:
        return self.draws.shape[-1]

    def at(self, t: int, rows: slice) -> np.ndarray:
        """What acts at step `t` for the environments `rows`."""
        return self.draws[t // self.hold, rows]

    def rows(self, rows: slice) -> Noise:
        """The noise of the environments `rows` only."""
        return Noise(self.draws[:, rows], self.steps, self.hold)

    def to_message(self) -> dict[str, Any]:
        """The fields of a Collect request (`envserver.protocol`); per step, just `noise`."""
        if not self.held:
            return {"noise": self.draws}
        return {"noise": self.draws, "noise_steps": self.steps, "noise_hold": self.hold}


def check_noise(noise: Noise, policy: NumpyPolicy, num_envs: int, action_shape: tuple[int, ...]) -> None:
    """ValueError unless `noise` fits a batch of `num_envs` environments acted on by `policy`: per step
    (steps, num_envs, *action_shape), held (periods, num_envs, *policy.log_std.shape) of a state-dependent one."""
    if noise.held and not policy.state_dependent:
        raise ValueError("held exploration weights need a state-dependent policy")
    shape = (num_envs, *(policy.log_std.shape if noise.held else action_shape))
    if noise.draws.shape[1:] != shape:
        raise ValueError(f"noise draws must have shape (draws, {', '.join(map(str, shape))}), got {noise.draws.shape}")
