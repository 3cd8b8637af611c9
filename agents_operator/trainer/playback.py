"""What `visualize` and `evaluate` play: a run's latest checkpoint or an exported policy, here or on an env server;
and `collect`, an exported policy's trajectories from env servers.

A run's policy is restored from its checkpoint into a learner and acts as the numpy actor, as in the trainer's
evaluations. An exported policy played here acts through its SavedModel's `act` signature
(`agents_operator.policy`), as it would when served; on an env server, which runs no TensorFlow, it acts as the
numpy actor read from the same SavedModel (`export.read`): the same actions, bit for bit. `collect` sends that
actor to env servers in a Collect request, as the trainer does in rollout mode: the policy goes to where the
environments are (a simulator, a machine), the trajectories come back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents_operator import policy as exported_policy
from agents_operator import topology
from agents_operator.config import TrainerConfig
from agents_operator.trainer import checkpoints, export
from agents_operator.trainer.envs import remote
from agents_operator.trainer.envs.episodes import Act, LocalEpisodes, OnFrame, Played
from agents_operator.trainer.envs.remote import RemoteBatchEnv
from agents_operator.trainer.learner import Learner, vector_size
from agents_operator.trainer.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.rollout import Rollout


@dataclass
class Player:
    """A deterministic policy and where its episodes run."""

    source: LocalEpisodes | RemoteBatchEnv
    policy: NumpyPolicy
    observations: Normalizer
    name: str
    """The checkpoint or the exported directory, for messages."""
    seed: int
    """The first seed of the trainer's evaluation episodes of this policy."""
    act: Act | None = None
    """An exported policy's SavedModel, which plays instead of the numpy actor when the episodes run here."""

    def play(self, episodes: int, seed: int, on_frame: OnFrame = None) -> Played:
        if self.act is not None and isinstance(self.source, LocalEpisodes):
            return self.source.play(self.act, episodes, seed, on_frame)
        return self.source.run_episodes(self.policy, self.observations, episodes, seed, on_frame)


def source(
    env_id: str, max_episode_steps: int | None, env_server: str | None, render: bool = False
) -> LocalEpisodes | RemoteBatchEnv:
    """An environment of this process (rendering rgb frames with `render`), or the env server at `env_server`."""
    if env_server is None:
        return LocalEpisodes(env_id, max_episode_steps, render=render)
    return remote.connect([env_server], env_id)


@contextlib.contextmanager
def of_run(config: TrainerConfig, logdir: Path, env_server: str | None, render: bool = False) -> Iterator[Player]:
    """The latest policy of the run in `logdir`; FileNotFoundError when it has no checkpoint."""
    with source(config.env_id, config.max_episode_steps, env_server, render) as episodes:
        learner = Learner(config, vector_size(episodes.observation_shape), vector_size(episodes.action_shape))
        try:
            restored = checkpoints.restore_latest(learner, logdir)
        finally:
            learner.close()
        if restored is None:
            raise FileNotFoundError(f"no checkpoint in {checkpoints.directory(logdir)}")
        state, path = restored
        observations = Normalizer(episodes.observation_shape, config.clip_observations, config.normalize_observations)
        observations.shared = state.observation_moments
        yield Player(episodes, state.policy, observations, path.name, config.seed + topology.EVALUATION_SEED_OFFSET)


@contextlib.contextmanager
def of_model(directory: Path, env_server: str | None, render: bool = False) -> Iterator[Player]:
    """The exported policy in `directory` (ExportError when there is none)."""
    numpy_policy, observations, metadata = export.read(directory)
    loaded = exported_policy.load(directory)
    seed = metadata.evaluation.seed if metadata.evaluation is not None else topology.EVALUATION_SEED_OFFSET
    with source(metadata.env_id, metadata.max_episode_steps, env_server, render) as episodes:
        yield Player(episodes, numpy_policy, observations, str(directory), seed, act=loaded)


def collect(directory: Path, env_servers: list[str], steps: int, seed: int) -> Rollout:
    """`steps` steps of every environment of `env_servers`, reset first, acting with the exported policy in
    `directory` (sampling: the noise is drawn from `seed`)."""
    numpy_policy, observations, metadata = export.read(directory)
    with remote.connect(env_servers, metadata.env_id) as env:
        env.reset()
        shape = (steps, env.num_envs, *env.action_shape)
        noise = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        return env.collect(numpy_policy, observations, noise)
