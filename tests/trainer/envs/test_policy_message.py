"""The policy in a message (envs/policy_message.py): plain values that the env server's wire format carries,
read back as the policy and normaliser the trainer had: the same actions."""

import numpy as np
import pytest

from agents_operator.trainer.envs.policy_message import parse_policy, policy_message
from agents_operator.trainer.envserver import protocol
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("per_step", [True, False])
def test_the_policy_read_from_its_message_acts_as_the_trainers(enabled, per_step):
    policy = random_policy(ROLLOUT_CONFIG, 3, 1, seed=5)
    observations = Normalizer((3,), 4.0, enabled, per_step)
    observations.shared = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
    observations.observe(np.ones((2, 3)))  # pending: in the statistics a rollout acts with, per step only
    observations = observations.snapshot()
    message = protocol.decode(protocol.encode(policy_message(policy, observations)))  # as an env server gets it
    got_policy, got_observations = parse_policy(message, (3,))
    count = 52.0 if per_step else 50.0
    assert (got_observations.clip, got_observations.enabled, got_observations.per_step) == (4.0, enabled, per_step)
    assert got_observations.shared.count == count
    x = np.random.default_rng(0).normal(scale=10.0, size=(20, 3)).astype(np.float32)
    np.testing.assert_array_equal(got_observations.normalize(x), observations.normalize(x))
    np.testing.assert_array_equal(got_policy.mean(x), policy.mean(x))
    noise = np.random.default_rng(1).standard_normal((20, 1), dtype=np.float32)
    for got, want in zip(got_policy.act(x, noise), policy.act(x, noise), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_policy.value_of(x), policy.value_of(x))
    assert got_policy.activation == policy.activation


def test_the_message_holds_every_weight_once_in_the_networks_order():
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    message = policy_message(policy, Normalizer((3,), 10.0))
    layers = len(ROLLOUT_CONFIG.policy_layers) + 1
    assert message["num_policy_layers"] == layers
    assert len(message["weights"]) == 2 * layers + 1 + 2 * (len(ROLLOUT_CONFIG.value_layers) + 1)
    assert message["weights"][2 * layers] is policy.log_std


def test_a_message_without_a_boolean_per_step_flag_is_refused_naming_it():
    message = policy_message(random_policy(ROLLOUT_CONFIG, 3, 1), Normalizer((3,), 4.0))
    message["observations_per_step"] = "yes"
    with pytest.raises(TypeError, match="observations_per_step: 'yes', must be true or false"):
        parse_policy(message, (3,))
