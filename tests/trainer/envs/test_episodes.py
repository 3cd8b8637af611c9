"""Evaluation episodes (envs/episodes.py) spread over a `BatchEnv`'s worker processes play exactly as they do
here, one after the other on one environment: the same returns and lengths per episode, whatever the number of
processes."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.envs.types import EnvProcessError
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from tests.trainer.envserver_envs import RAISING
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(120)


EPISODES = 5


SEED = 1_000_123


def normalizer(dim: int) -> Normalizer:
    """Observation statistics as a trainer has them mid-run, so that normalising changes the actions."""
    observations = Normalizer((dim,), ROLLOUT_CONFIG.clip_observations)
    observations.shared = Moments(50.0, np.linspace(-10.0, 20.0, dim), np.linspace(60.0, 300.0, dim))
    return observations


def serial_and_parallel(env_id: str, limit: int, processes: int) -> tuple[tuple, tuple, tuple]:
    """The episodes played here, then twice by a batch of 3 environments over `processes` processes."""
    with LocalEpisodes(env_id, limit) as local:
        dim, act_dim = local.observation_shape[0], local.action_shape[0]
        policy = random_policy(ROLLOUT_CONFIG, dim, act_dim)
        serial = local.run_episodes(policy, normalizer(dim), EPISODES, SEED)
    with BatchEnv(env_id, 3, envs_per_process=3 // processes, seed=7, max_episode_steps=limit) as batch:
        assert batch.num_processes == processes
        first = batch.run_episodes(policy, normalizer(dim), EPISODES, SEED)
        again = batch.run_episodes(policy, normalizer(dim), EPISODES, SEED)
    return serial, first, again


@pytest.mark.parametrize("processes", [1, 3])
def test_parallel_episodes_are_the_serial_ones_in_episode_order(processes: int) -> None:
    serial, first, again = serial_and_parallel("Pendulum-v1", 40, processes)
    assert len(set(serial[0])) == EPISODES  # distinct episodes: the order is checked too
    assert first == serial  # floats compared exactly
    assert again == serial


def test_a_pybullet_episode_depends_only_on_its_seed() -> None:
    """A fresh PyBullet environment's first episode differs from later ones of the same seed unless the
    environment was reset once before (`episodes.make_episode_env`): without that, the episodes each fresh
    worker environment starts with would differ from the serial ones."""
    serial, first, again = serial_and_parallel("HalfCheetahBulletEnv-v0", 15, 3)
    assert first == serial
    assert again == serial


def test_evaluating_leaves_the_batch_alone() -> None:
    actions = np.zeros((3, 1), np.float32)
    with (
        BatchEnv("Pendulum-v1", 3, envs_per_process=1, seed=3) as plain,
        BatchEnv("Pendulum-v1", 3, envs_per_process=1, seed=3) as evaluated,
    ):
        policy = random_policy(ROLLOUT_CONFIG, 3, 1)
        np.testing.assert_array_equal(plain.reset(), evaluated.reset())
        for _ in range(3):
            evaluated.run_episodes(policy, normalizer(3), 4, SEED)
            want, got = plain.step(actions), evaluated.step(actions)
            np.testing.assert_array_equal(want.observations, got.observations)


def test_an_error_in_an_evaluation_environment_surfaces_with_its_traceback() -> None:
    with BatchEnv(RAISING, 2, envs_per_process=1) as batch:
        with pytest.raises(EnvProcessError, match="the evaluation environment raised") as failure:
            batch.run_episodes(random_policy(ROLLOUT_CONFIG, 1, 1), normalizer(1), 3, 0)
        assert "ZeroDivisionError: the test environment fails on purpose" in str(failure.value)
        with pytest.raises(RuntimeError, match="unusable"):
            batch.run_episodes(random_policy(ROLLOUT_CONFIG, 1, 1), normalizer(1), 1, 0)
