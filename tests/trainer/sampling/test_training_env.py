"""A batch of environments with its normalisers (sampling/training_env.py): statistics shaped as the batch is,
set from the config, and the first observations of a reset counted in them."""

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.sampling.training_env import TrainingEnv

pytestmark = pytest.mark.timeout(60)


def test_the_statistics_follow_the_batch_and_the_config():
    config = TrainerConfig(clip_observations=5.0, normalize_rewards=False, discount=0.9, envs_per_worker=3)
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3) as batch:
        env = TrainingEnv(batch, config)
        assert env.env is batch
        assert (env.observations.shape, env.observations.clip, env.observations.enabled) == ((3,), 5.0, True)
        assert env.rewards.returns.shape == (3,) and env.rewards.discount == 0.9
        assert not env.rewards.statistics.enabled


def test_a_reset_counts_the_first_observations_and_returns_them_raw():
    with (
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=4) as batch,
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=4) as same,
    ):
        env = TrainingEnv(batch, TrainerConfig(envs_per_worker=2, rollout_steps=8, minibatches=1))
        observations = env.reset()
        np.testing.assert_array_equal(observations, same.reset())
        pending = env.observations.pending
        assert pending.count == 2
        np.testing.assert_allclose(pending.sum, observations.sum(axis=0), rtol=1e-6)
