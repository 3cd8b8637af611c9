"""Everything between the policy and the environments, in one place.

In order, from the simulator outwards: the time limit (`max_episode_steps`) and float32 observations,
applied by `envs.make_env` in the environment processes; action clipping to the action bounds, which
`BatchEnv.step` does as it writes the actions to the workers (and `run_episodes` here for its single
environment); then here, streaming observation normalisation and reward scaling (applied to a whole
rollout once it is complete, see `RewardScaler`). The policy samples
unbounded Gaussian actions; only the clipped copy reaches the environment, and the update uses the
sampled one, so the log-probabilities stay those of the Gaussian.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.normalize import Normalizer, RewardScaler

if TYPE_CHECKING:
    import gymnasium

    from agents_operator.trainer.envs import BatchEnv
    from agents_operator.trainer.envserver.client import RemoteBatchEnv
    from agents_operator.trainer.ppo.policy import NumpyPolicy


class TrainingEnv:
    """A `BatchEnv` or `RemoteBatchEnv` (both clip actions) with the statistics that normalise its
    observations and scale its rewards; `rollouts.to_batch` feeds them a rollout at a time."""

    def __init__(self, env: BatchEnv | RemoteBatchEnv, config: TrainerConfig):
        self.env = env
        self.observations = Normalizer(env.observation_shape, config.clip_observations, config.normalize_observations)
        self.rewards = RewardScaler(env.num_envs, config.discount, config.clip_rewards, config.normalize_rewards)

    def reset(self) -> np.ndarray:
        """Reset every environment and count the first observations in the statistics; returns them raw."""
        observations = self.env.reset()
        self.observations.observe(observations)
        return observations


def run_episodes(
    env: gymnasium.Env,
    policy: NumpyPolicy,
    observations: Normalizer,
    episodes: int,
    seed: int,
    on_frame: Callable[[np.ndarray], None] | None = None,
) -> tuple[list[float], list[int]]:
    """Returns and lengths of `episodes` episodes of the deterministic policy (the Gaussian's mean).

    The normaliser is used as it is, without updating it. With `on_frame`, every rendered frame of an
    env made with render_mode="rgb_array" is passed to it.
    """
    low, high = env.action_space.low, env.action_space.high
    returns, lengths = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, length, done = 0.0, 0, False
        while not done:
            if on_frame is not None:
                on_frame(env.render())
            normalized = observations.normalize(np.asarray(obs, dtype=np.float32)[None])
            action = np.clip(policy.mean(normalized)[0], low, high)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            length += 1
            done = terminated or truncated
        if on_frame is not None:
            on_frame(env.render())
        returns.append(total)
        lengths.append(length)
    return returns, lengths


class LocalEpisodes:
    """`run_episodes` on one environment of this process, made on first use; with `render`, one that renders
    rgb frames.

    `envserver.client.RemoteBatchEnv` has the same `run_episodes`, `observation_shape`, `action_shape` and
    `render_fps`, so evaluations and videos play their episodes on either.
    """

    def __init__(self, env_id: str, max_episode_steps: int | None = None, render: bool = False):
        self.env_id = env_id
        self.max_episode_steps = max_episode_steps
        self.render = render

    @functools.cached_property
    def env(self) -> gymnasium.Env:
        from agents_operator.trainer.envs import make_env

        if self.render:
            # pygame (classic-control rendering) draws on plain surfaces; without a display driver set, SDL
            # looks for one and complains on stderr. pygame still imports the deprecated pkg_resources.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
        return make_env(self.env_id, self.max_episode_steps, render_mode="rgb_array" if self.render else None)

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self.env.observation_space.shape

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self.env.action_space.shape

    @property
    def render_fps(self) -> float | None:
        return self.env.metadata.get("render_fps")

    def run_episodes(
        self,
        policy: NumpyPolicy,
        observations: Normalizer,
        episodes: int,
        seed: int,
        on_frame: Callable[[np.ndarray], None] | None = None,
    ) -> tuple[list[float], list[int]]:
        return run_episodes(self.env, policy, observations, episodes, seed, on_frame)

    def close(self) -> None:
        """Close the environment, if it was made; the next use makes a fresh one."""
        env = self.__dict__.pop("env", None)
        if env is not None:
            env.close()

    def __enter__(self) -> LocalEpisodes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
