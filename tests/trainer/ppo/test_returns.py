"""GAE and value targets against plain Python loops written from the definitions."""

import numpy as np
import pytest

from agents_operator.trainer.ppo import returns


def _reference(rewards, values, last_values, final_values, terminated, truncated, discount, lam):
    """A_t = sum_l (gamma lambda)^l delta_{t+l}, summed per environment up to the end of t's episode."""
    steps, envs = rewards.shape
    advantages = np.zeros((steps, envs))
    for env in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                if terminated[k, env]:
                    next_value = 0.0
                elif truncated[k, env]:
                    next_value = final_values[k, env]
                elif k + 1 < steps:
                    next_value = values[k + 1, env]
                else:
                    next_value = last_values[env]
                delta = rewards[k, env] + discount * next_value - values[k, env]
                total += weight * delta
                weight *= discount * lam
                if terminated[k, env] or truncated[k, env]:
                    break
            advantages[t, env] = total
    return advantages


def _random_rollout(seed, steps=12, envs=3):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    last_values = rng.normal(size=envs).astype(np.float32)
    final_values = rng.normal(size=(steps, envs)).astype(np.float32)
    ended = rng.random((steps, envs)) < 0.25
    terminated = ended & (rng.random((steps, envs)) < 0.5)
    truncated = ended & ~terminated
    return rewards, values, last_values, final_values, terminated, truncated


def _gae(rewards, values, last_values, final_values, terminated, truncated, discount, lam):
    next_values = returns.next_values(values, last_values, final_values, terminated | truncated)
    return returns.gae(rewards, values, next_values, terminated, truncated, discount, lam)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("discount", "lam"), [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0)])
def test_gae_matches_the_definition(seed, discount, lam):
    rollout = _random_rollout(seed)
    advantages, targets = _gae(*rollout, discount, lam)
    expected = _reference(*rollout, discount, lam)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, expected + rollout[1], rtol=1e-5, atol=1e-5)
    assert advantages.dtype == targets.dtype == np.float32


def test_lambda_one_gives_discounted_returns_bootstrapped_at_truncation():
    """One env, episodes: [r r r | terminated] [r r | truncated, V(final) = 10] [r r, rollout ends, V = 4]."""
    rewards = np.ones((7, 1), np.float32)
    terminated = np.zeros((7, 1), bool)
    truncated = np.zeros((7, 1), bool)
    terminated[2] = True
    truncated[4] = True
    final_values = np.zeros((7, 1), np.float32)
    final_values[4] = 10.0
    values = np.zeros((7, 1), np.float32)
    _, targets = _gae(rewards, values, np.array([4.0], np.float32), final_values, terminated, truncated, 0.5, 1.0)
    first = [1 + 0.5 + 0.25, 1 + 0.5, 1]
    second = [1 + 0.5 * (1 + 0.5 * 10), 1 + 0.5 * 10]
    third = [1 + 0.5 * (1 + 0.5 * 4), 1 + 0.5 * 4]
    expected = first + second + third
    np.testing.assert_allclose(targets[:, 0], expected)


def test_terminal_states_are_not_bootstrapped_even_with_a_final_value():
    rewards = np.zeros((1, 1), np.float32)
    values = np.zeros((1, 1), np.float32)
    final_values = np.full((1, 1), 100.0, np.float32)
    last_values = np.array([50.0], np.float32)
    terminated, truncated = np.ones((1, 1), bool), np.zeros((1, 1), bool)
    advantages, _ = _gae(rewards, values, last_values, final_values, terminated, truncated, 0.9, 0.9)
    assert advantages[0, 0] == 0.0
