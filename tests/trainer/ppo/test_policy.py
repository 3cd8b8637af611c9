"""The numpy actor (ppo/policy.py): a Gaussian around the policy network's output, sampled from given noise
with its log-probability, its mean computed in float64 and rounded once, its weights read back in order."""

import math

import numpy as np
import pytest

from agents_operator.trainer.ppo.policy import (
    SDE_EPSILON,
    NumpyPolicy,
    gaussian_log_prob_np,
    mlp_np,
    mlp_rounded_once,
)

OBS, ACT = 4, 2


def random_policy(activation: str = "tanh", seed: int = 0) -> NumpyPolicy:
    rng = np.random.default_rng(seed)

    def layer(fan_in: int, fan_out: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(size=(fan_in, fan_out)).astype(np.float32), rng.normal(size=fan_out).astype(np.float32)

    log_std = np.array([-0.5, 0.25], np.float32)
    return NumpyPolicy([layer(OBS, 8), layer(8, ACT)], log_std, [layer(OBS, 8), layer(8, 1)], activation)


def test_mlp_applies_the_activation_between_layers_only():
    layers = [(np.array([[1.0, -1.0]]), np.array([0.0, 0.0])), (np.array([[1.0], [1.0]]), np.array([-5.0]))]
    x = np.array([[2.0]])
    np.testing.assert_allclose(mlp_np(x, layers, "relu"), [[2.0 - 5.0]])  # relu(2), relu(-2) = 0: no relu last
    np.testing.assert_allclose(mlp_np(x, layers, "tanh"), [[np.tanh(2.0) + np.tanh(-2.0) - 5.0]])


def test_actions_are_the_mean_plus_std_times_noise_with_the_gaussians_log_probability():
    policy = random_policy()
    rng = np.random.default_rng(1)
    obs, noise = rng.normal(size=(16, OBS)).astype(np.float32), rng.normal(size=(16, ACT)).astype(np.float32)
    actions, log_probs, means = policy.act(obs, noise)
    np.testing.assert_allclose(means, mlp_np(obs, policy.policy, "tanh"))
    np.testing.assert_allclose(actions, means + np.exp(policy.log_std) * noise, rtol=1e-6)
    std = np.exp(policy.log_std.astype(np.float64))
    density = np.exp(-0.5 * ((actions - means) / std) ** 2) / (std * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(log_probs, np.log(density).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert log_probs.dtype == np.float32 and log_probs.shape == (16,)


def test_the_log_probability_of_the_mean_is_the_densitys_peak():
    log_std = np.array([0.0, np.log(2.0)], np.float32)
    expected = -math.log(2.0) - math.log(2.0 * math.pi)  # two dimensions: std 1 and 2
    assert gaussian_log_prob_np(np.zeros((1, 2)), log_std)[0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_mean_is_the_float64_pass_rounded_once(activation):
    policy = random_policy(activation)
    obs = np.random.default_rng(2).normal(size=(100, OBS)).astype(np.float32)
    layers64 = [(k.astype(np.float64), b.astype(np.float64)) for k, b in policy.policy]
    want = mlp_np(obs.astype(np.float64), layers64, activation).astype(np.float32)
    np.testing.assert_array_equal(policy.mean(obs), want)
    np.testing.assert_array_equal(mlp_rounded_once(obs, layers64, activation), want)
    assert policy.mean(obs).dtype == np.float32
    np.testing.assert_allclose(policy.mean(obs), policy.act(obs, np.zeros((100, ACT), np.float32))[2], rtol=1e-4)


def test_the_value_is_one_number_per_observation():
    policy = random_policy()
    obs = np.random.default_rng(3).normal(size=(7, OBS)).astype(np.float32)
    np.testing.assert_allclose(policy.value_of(obs), mlp_np(obs, policy.value, "tanh")[:, 0])
    assert policy.value_of(obs[0]).shape == ()


def test_weights_read_back_in_order_are_the_same_policy():
    policy = random_policy()
    values = [array.copy() for layer in policy.policy for array in layer] + [policy.log_std.copy()]
    values += [array.copy() for layer in policy.value for array in layer]
    again = NumpyPolicy.from_values(values, len(policy.policy), policy.activation)
    for got, want in zip(again.policy + again.value, policy.policy + policy.value, strict=True):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(again.log_std, policy.log_std)
    obs = np.ones((3, OBS), np.float32)
    np.testing.assert_array_equal(again.mean(obs), policy.mean(obs))


def test_log_prob_is_what_act_gave_for_the_actions_it_sampled():
    policy = random_policy(seed=4)
    observations = np.random.default_rng(1).normal(size=(50, OBS)).astype(np.float32)
    noise = np.random.default_rng(2).standard_normal((50, ACT), dtype=np.float32)
    actions, log_probs, _ = policy.act(observations, noise)
    np.testing.assert_allclose(policy.log_prob(observations, actions), log_probs, rtol=1e-5, atol=1e-5)
    assert policy.log_prob(observations, actions).dtype == np.float32


def state_dependent_policy(seed: int = 0) -> NumpyPolicy:
    """`random_policy` with gSDE's log-std: one per unit of the last hidden layer (8) and action dimension."""
    policy = random_policy(seed=seed)
    log_std = np.random.default_rng(seed + 1).normal(-1.0, 0.5, size=(8, ACT)).astype(np.float32)
    return NumpyPolicy(policy.policy, log_std, policy.value, policy.activation)


def test_a_state_dependent_std_is_gsdes_of_the_last_hidden_layer():
    policy = state_dependent_policy()
    obs = np.random.default_rng(2).normal(size=(16, OBS)).astype(np.float32)
    mean, log_std = policy.gaussian(obs)
    latent = np.tanh(obs.astype(np.float64) @ policy.policy[0][0] + policy.policy[0][1])
    variance = np.square(latent) @ np.exp(2.0 * policy.log_std.astype(np.float64)) + SDE_EPSILON
    assert policy.state_dependent and not random_policy().state_dependent
    assert log_std.shape == (16, ACT) and log_std.dtype == np.float32
    np.testing.assert_allclose(log_std, 0.5 * np.log(variance), rtol=1e-5)
    np.testing.assert_allclose(mean, mlp_np(obs, policy.policy, "tanh"))
    np.testing.assert_array_equal(policy.mean(obs), random_policy().mean(obs))  # the deterministic action


def test_state_dependent_actions_are_distributed_as_exploration_weights_drawn_every_step():
    """gSDE: a = mean(s) + latent(s) @ theta, theta (L, act_dim) ~ N(0, exp(log_std)^2), drawn anew per step.
    Sampled that way for one state, the actions have the std that `act` samples with."""
    policy = state_dependent_policy()
    obs = np.random.default_rng(3).normal(size=(1, OBS)).astype(np.float32)
    latent = np.tanh(obs @ policy.policy[0][0] + policy.policy[0][1])
    theta = np.random.default_rng(4).normal(size=(40_000, 8, ACT)) * np.exp(policy.log_std)
    sampled_std = np.einsum("l,nla->na", latent[0], theta).std(axis=0)
    np.testing.assert_allclose(sampled_std, np.exp(policy.gaussian(obs)[1][0]), rtol=0.02)


def test_state_dependent_log_probs_are_the_gaussians_of_the_states_std():
    policy = state_dependent_policy()
    rng = np.random.default_rng(5)
    obs, noise = rng.normal(size=(16, OBS)).astype(np.float32), rng.normal(size=(16, ACT)).astype(np.float32)
    actions, log_probs, means = policy.act(obs, noise)
    std = np.exp(policy.gaussian(obs)[1].astype(np.float64))
    np.testing.assert_allclose(actions, means + std * noise, rtol=1e-5, atol=1e-6)
    density = np.exp(-0.5 * ((actions - means) / std) ** 2) / (std * math.sqrt(2 * math.pi))
    np.testing.assert_allclose(log_probs, np.log(density).sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy.log_prob(obs, actions), log_probs, rtol=1e-5, atol=1e-5)


def test_held_exploration_weights_act_with_latent_times_weights_and_the_gaussians_log_probs():
    """gSDE's held weights: the noise is latent @ (exp(log_std) * W), so rows that share W and the state act
    alike; its spread is the state's std, and the log-probabilities are the actions' under that Gaussian."""
    policy = state_dependent_policy()
    rng = np.random.default_rng(6)
    obs = np.repeat(rng.normal(size=(1, OBS)).astype(np.float32), 20_000, axis=0)
    weights = rng.standard_normal((20_000, 8, ACT), dtype=np.float32)
    actions, log_probs, means = policy.act_held(obs, weights)
    latent = np.tanh(obs[0] @ policy.policy[0][0] + policy.policy[0][1])
    np.testing.assert_allclose(actions[:5] - means[:5], latent @ (np.exp(policy.log_std) * weights[:5]), rtol=1e-4)
    std = np.exp(policy.gaussian(obs[:1])[1][0])
    np.testing.assert_allclose((actions - means).std(axis=0), std, rtol=0.03)
    np.testing.assert_allclose(policy.log_prob(obs[:16], actions[:16]), log_probs[:16], rtol=1e-5, atol=1e-5)
    again, _, _ = policy.act_held(obs[:2], np.repeat(weights[:1], 2, axis=0))
    np.testing.assert_array_equal(again[0], again[1])
