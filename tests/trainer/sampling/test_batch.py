"""`sampling.batch.to_batch`: a rollout becomes the PPO batch, its GAE checked against numbers computed by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.batch import to_batch
from agents_operator.trainer.sampling.training_env import TrainingEnv

T, N = 4, 2


def _rollout() -> Rollout:
    """Two environments, four steps. Environment 0 terminates at t = 1; environment 1 hits its time limit at
    t = 1, the value of its final observation 10."""
    terminated = np.zeros((T, N), bool)
    truncated = np.zeros((T, N), bool)
    terminated[1, 0] = truncated[1, 1] = True
    final_values = np.zeros((T, N), np.float32)
    final_values[1, 1] = 10.0
    observations = np.arange((T + 1) * N, dtype=np.float32).reshape(T + 1, N, 1)
    return Rollout(
        observations=observations,
        acting=-observations,
        actions=np.full((T, N, 1), 0.25, np.float32),
        log_probs=np.full((T, N), -1.0, np.float32),
        means=np.zeros((T, N, 1), np.float32),
        values=np.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]], np.float32),
        rewards=np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]], np.float32),
        terminated=terminated,
        truncated=truncated,
        final_values=final_values,
        last_values=np.array([3.0, 0.0], np.float32),
        episode_steps=np.array([1, 1]),
        episode_envs=np.array([0, 1]),
        episode_returns=np.array([3.0, 2.0]),
        episode_lengths=np.array([2, 2]),
    )


@pytest.fixture
def batch_of():
    config = TrainerConfig(
        env_id="Pendulum-v1", discount=0.9, gae_lambda=0.5, normalize_observations=False, normalize_rewards=False
    )
    env = TrainingEnv(SimpleNamespace(observation_shape=(1,), num_envs=N), config)
    policy = NumpyPolicy(policy=[], log_std=np.array([-0.5]), value=[], activation="tanh")
    return lambda rollout: to_batch(rollout, env, policy, config)


def test_gae_and_value_targets_by_hand(batch_of):
    """gamma = 0.9, lambda = 0.5, so gamma lambda = 0.45; delta_t = r_t + gamma V(s_{t+1}) (1 - terminated_t) - V(s_t),
    A_t = delta_t + 0.45 (1 - done_t) A_{t+1}, from the last step back.

    Environment 0 (terminated at t = 1, bootstrapped from last_values 3 after t = 3):
        t = 3: delta = 4 + 0.9 * 3   - 2   = 4.7               A = 4.7
        t = 2: delta = 3 + 0.9 * 2   - 1.5 = 3.3               A = 3.3 + 0.45 * 4.7 = 5.415
        t = 1: delta = 2 + 0         - 1   = 1   (terminal)    A = 1   (the trace stops)
        t = 0: delta = 1 + 0.9 * 1   - 0.5 = 1.4               A = 1.4 + 0.45 * 1 = 1.85
    Environment 1 (truncated at t = 1: bootstrapped from its final observation's value 10, V = 0 elsewhere):
        t = 3: delta = 1                                        A = 1
        t = 2: delta = 1                                        A = 1 + 0.45 * 1 = 1.45
        t = 1: delta = 1 + 0.9 * 10 = 10  (time limit)         A = 10  (the trace stops)
        t = 0: delta = 1                                        A = 1 + 0.45 * 10 = 5.5
    Value targets: A + V.
    """
    batch, returns, lengths = batch_of(_rollout())
    advantages = np.array([[1.85, 5.5], [1.0, 10.0], [5.415, 1.45], [4.7, 1.0]])
    targets = advantages + np.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]])
    np.testing.assert_allclose(batch.advantages, advantages.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(batch.returns, targets.reshape(-1), rtol=1e-6)
    assert (returns, lengths) == ([3.0, 2.0], [2, 2])


def test_the_batch_is_time_major_flattened_and_holds_the_observations_as_acted_on(batch_of):
    rollout = _rollout()
    batch, _, _ = batch_of(rollout)
    assert len(batch) == T * N
    # Row t * N + j is step t of environment j; the observations are those acted on (not the one after step T),
    # as the policy saw them (`Rollout.acting`), not the raw ones.
    np.testing.assert_array_equal(batch.observations[:, 0], [0, -1, -2, -3, -4, -5, -6, -7])
    np.testing.assert_array_equal(batch.values, rollout.values.reshape(-1))
    np.testing.assert_array_equal(batch.log_probs, np.full(T * N, -1.0))
    np.testing.assert_array_equal(batch.log_std, np.array([-0.5], np.float32))
