"""Whole episodes of the deterministic policy (the Gaussian's mean) on one environment: evaluations and videos.

`run_episodes` plays them on an environment it is given (an env server's own, in `envserver.server`);
`LocalEpisodes` on one of this process's, made on first use. `play` runs any deterministic policy, such as an
exported one (`agents_operator.exported.policy`), the same way. `batch.BatchEnv.run_episodes` plays the same episodes
spread over its worker processes, `envserver.client.RemoteBatchEnv.run_episodes` on an env server.

An episode depends only on the policy and its seed, not on the environment that plays it nor on what that
environment played before, so that where the episodes run (here, in worker processes, on an env server, in
any grouping) changes no return. Gymnasium's `reset(seed=...)` reseeds everything an episode draws, but a
PyBullet environment's first reset builds its scene and every later one restores a state saved then: the
first episode of a fresh environment differs from the same seed's on a used one in the last digits of its
return. `make_episode_env` therefore resets every environment once before its first episode.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import gymnasium
import numpy as np

from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

Act = Callable[[np.ndarray], np.ndarray]
"""A deterministic policy: one raw float32 observation -> the action to step with."""
OnFrame = Callable[[np.ndarray], None] | None
Played = tuple[list[float], list[int]]
"""The returns and lengths of the episodes played."""


def make_episode_env(env_id: str, max_episode_steps: int | None, render: bool = False) -> gymnasium.Env:
    """An environment to play whole episodes on, reset once already (see the module docstring); with `render`,
    one that renders rgb frames."""
    if render:
        # pygame (classic-control rendering) draws on plain surfaces; without a display driver set, SDL
        # looks for one and complains on stderr. pygame still imports the deprecated pkg_resources.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    env = make_env(env_id, max_episode_steps, render_mode="rgb_array" if render else None)
    env.reset()
    return env


def deterministic(policy: NumpyPolicy, observations: Normalizer, low: np.ndarray, high: np.ndarray) -> Act:
    """The trainer's deterministic policy: the Gaussian's mean on the normalised observation, clipped to the
    action bounds. The normaliser is used as it is, without updating it."""

    def act(obs: np.ndarray) -> np.ndarray:
        return np.clip(policy.mean(observations.normalize(obs[None]))[0], low, high)

    return act


def play(env: gymnasium.Env, act: Act, episodes: int, seed: int, on_frame: OnFrame = None) -> Played:
    """Returns and lengths of `episodes` episodes of `act`, episode i reset with seed `seed` + i.

    With `on_frame`, every rendered frame of an env made with render_mode="rgb_array" is passed to it.
    """
    returns, lengths = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, length, done = 0.0, 0, False
        while not done:
            if on_frame is not None:
                on_frame(env.render())
            obs, reward, terminated, truncated, _ = env.step(act(np.asarray(obs, dtype=np.float32)))
            total += float(reward)
            length += 1
            done = terminated or truncated
        if on_frame is not None:
            on_frame(env.render())
        returns.append(total)
        lengths.append(length)
    return returns, lengths


def run_episodes(
    env: gymnasium.Env,
    policy: NumpyPolicy,
    observations: Normalizer,
    episodes: int,
    seed: int,
    on_frame: OnFrame = None,
) -> Played:
    """`play` with the trainer's `deterministic` policy."""
    act = deterministic(policy, observations, env.action_space.low, env.action_space.high)
    return play(env, act, episodes, seed, on_frame)


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
        return make_episode_env(self.env_id, self.max_episode_steps, self.render)

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return self.env.observation_space.shape

    @property
    def action_shape(self) -> tuple[int, ...]:
        return self.env.action_space.shape

    @property
    def action_low(self) -> np.ndarray:
        return self.env.action_space.low

    @property
    def action_high(self) -> np.ndarray:
        return self.env.action_space.high

    @property
    def render_fps(self) -> float | None:
        return self.env.metadata.get("render_fps")

    def run_episodes(
        self, policy: NumpyPolicy, observations: Normalizer, episodes: int, seed: int, on_frame: OnFrame = None
    ) -> Played:
        return run_episodes(self.env, policy, observations, episodes, seed, on_frame)

    def play(self, act: Act, episodes: int, seed: int, on_frame: OnFrame = None) -> Played:
        return play(self.env, act, episodes, seed, on_frame)

    def close(self) -> None:
        """Close the environment, if it was made; the next use makes a fresh one."""
        env = self.__dict__.pop("env", None)
        if env is not None:
            env.close()

    def __enter__(self) -> LocalEpisodes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
