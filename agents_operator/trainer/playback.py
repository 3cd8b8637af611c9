"""What `visualize` and `evaluate` play: a run's latest checkpoint or an exported policy, here or on an env server;
and `collect`, an exported policy's trajectories from env servers.

A run's policy is restored from its checkpoint into a learner and acts as the numpy actor, as in the trainer's
evaluations. Episodes that are not rendered play spread over worker processes (`BatchEnv.run_episodes`), as the
trainer's evaluations do; rendered ones play in this process, one after the other. An exported policy rendered
here acts through its SavedModel's `act` signature (`agents_operator.exported.policy`), as it would when served; in
worker processes and on an env server, which run no TensorFlow, it acts as the numpy actor read from the same
SavedModel (`export.read`): the same actions, bit for bit (tests/trainer/test_export.py). `collect` sends that
actor to env servers in a Collect request, as the trainer does in rollout mode: the policy goes to where the
environments are (a simulator, a machine), the trajectories come back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents_operator import topology
from agents_operator.config import TrainerConfig
from agents_operator.exported import policy as exported_policy
from agents_operator.trainer import checkpoints, export
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import Act, LocalEpisodes, OnFrame, Played
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.envserver import client
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.learner import Learner, vector_size
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy


@dataclass
class Player:
    """A deterministic policy and where its episodes run."""

    source: Source
    policy: NumpyPolicy
    observations: Normalizer
    name: str
    """The checkpoint or the exported directory, for messages."""
    seed: int
    """The first seed of the trainer's evaluation episodes of this policy."""
    act: Act | None = None
    """An exported policy's SavedModel, which plays instead of the numpy actor when the episodes are rendered
    here."""

    def play(self, episodes: int, seed: int, on_frame: OnFrame = None) -> Played:
        if isinstance(self.source, BatchEnv):
            return self.source.run_episodes(self.policy, self.observations, episodes, seed)
        if self.act is not None and isinstance(self.source, LocalEpisodes):
            return self.source.play(self.act, episodes, seed, on_frame)
        return self.source.run_episodes(self.policy, self.observations, episodes, seed, on_frame)


Source = BatchEnv | LocalEpisodes | RemoteBatchEnv
"""Where a player's episodes run: spread over worker processes, rendered in this process, or on an env server."""


def source(env_id: str, max_episode_steps: int | None, env_server: str | None, episodes: int, render: bool) -> Source:
    """The env server at `env_server`; else, with `render`, an environment of this process that renders rgb
    frames, or without, worker processes to play `episodes` episodes on (`BatchEnv.for_episodes`)."""
    if env_server is not None:
        return client.connect([env_server], env_id)
    if render:
        return LocalEpisodes(env_id, max_episode_steps, render=True)
    return BatchEnv.for_episodes(env_id, max_episode_steps, episodes)


@contextlib.contextmanager
def of_run(
    config: TrainerConfig, logdir: Path, env_server: str | None, episodes: int = 1, render: bool = False
) -> Iterator[Player]:
    """The latest policy of the run in `logdir`, to play `episodes` episodes where `source` says;
    FileNotFoundError when the run has no checkpoint."""
    with source(config.env_id, config.max_episode_steps, env_server, episodes, render) as where:
        learner = Learner(config, vector_size(where.observation_shape), vector_size(where.action_shape))
        try:
            restored = checkpoints.restore_latest(learner, logdir)
        finally:
            learner.close()
        if restored is None:
            raise FileNotFoundError(f"no checkpoint in {checkpoints.directory(logdir)}")
        state, path = restored
        observations = Normalizer(where.observation_shape, config.clip_observations, config.normalize_observations)
        observations.shared = state.observation_moments
        yield Player(where, state.policy, observations, path.name, config.seed + topology.EVALUATION_SEED_OFFSET)


@contextlib.contextmanager
def of_model(directory: Path, env_server: str | None, episodes: int = 1, render: bool = False) -> Iterator[Player]:
    """The exported policy in `directory`, as `of_run` (ExportError when there is none)."""
    numpy_policy, observations, metadata = export.read(directory)
    loaded = exported_policy.load(directory)
    seed = metadata.evaluation.seed if metadata.evaluation is not None else topology.EVALUATION_SEED_OFFSET
    with source(metadata.env_id, metadata.max_episode_steps, env_server, episodes, render) as where:
        yield Player(where, numpy_policy, observations, str(directory), seed, act=loaded)


def collect(directory: Path, env_servers: list[str], steps: int, seed: int) -> Rollout:
    """`steps` steps of every environment of `env_servers`, reset first, acting with the exported policy in
    `directory` (sampling: the noise is drawn from `seed`)."""
    numpy_policy, observations, metadata = export.read(directory)
    with client.connect(env_servers, metadata.env_id) as env:
        env.reset()
        shape = (steps, env.num_envs, *env.action_shape)
        noise = np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)
        return env.collect(numpy_policy, observations, Noise.per_step(noise))
