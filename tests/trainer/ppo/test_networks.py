"""The networks as TensorFlow variables and ops (ppo/networks.py): orthogonal initialisation with the PPO
baselines' gains, the weights in the order the numpy actor reads them, and the same forward pass as numpy's."""

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo.networks import Networks, mlp_tf
from agents_operator.trainer.ppo.policy import NumpyPolicy, mlp_np

OBS, ACT = 5, 2


def built(**settings):
    """The networks of a config in a graph of their own, with the values of their variables once initialised."""
    config = TrainerConfig(policy_layers=[32, 16], value_layers=[8], init_log_std=-0.5, **settings)
    graph = tf.Graph()
    with graph.as_default():
        networks = Networks.create(OBS, ACT, config)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(networks.variables())
    return networks, values, config


def test_the_variables_are_listed_as_the_numpy_actor_reads_them():
    networks, values, config = built()
    names = [v.op.name for v in networks.variables()]
    assert names == [
        "policy/dense0/kernel", "policy/dense0/bias", "policy/dense1/kernel", "policy/dense1/bias",
        "policy/dense2/kernel", "policy/dense2/bias", "policy/log_std",
        "value/dense0/kernel", "value/dense0/bias", "value/dense1/kernel", "value/dense1/bias",
    ]  # fmt: skip
    policy = NumpyPolicy.from_values(values, len(networks.policy), config.activation)
    assert [kernel.shape for kernel, _ in policy.policy] == [(OBS, 32), (32, 16), (16, ACT)]
    assert [kernel.shape for kernel, _ in policy.value] == [(OBS, 8), (8, 1)]
    np.testing.assert_array_equal(policy.log_std, [-0.5, -0.5])


def test_orthogonal_initialisation_with_the_baselines_gains_and_zero_biases():
    networks, values, _ = built()
    policy = NumpyPolicy.from_values(values, len(networks.policy), "tanh")
    (hidden, _), _, (head, _) = policy.policy
    np.testing.assert_allclose(hidden @ hidden.T, 2.0 * np.eye(OBS), atol=1e-5)  # rows orthogonal, gain sqrt 2
    np.testing.assert_allclose(head.T @ head, 0.01**2 * np.eye(ACT), atol=1e-7)  # the policy head: 0.01
    (_, _), (value_head, _) = policy.value
    np.testing.assert_allclose(value_head.T @ value_head, np.eye(1), atol=1e-5)  # the value head: 1
    assert all(not bias.any() for _, bias in policy.policy + policy.value)


def test_without_orthogonal_initialisation_the_weights_are_glorot_uniform():
    networks, values, _ = built(orthogonal_init=False)
    kernel = NumpyPolicy.from_values(values, len(networks.policy), "tanh").policy[0][0]
    limit = np.sqrt(6 / (OBS + 32))
    assert np.abs(kernel).max() <= limit and not np.allclose(kernel @ kernel.T, 2.0 * np.eye(OBS), atol=0.1)


def test_pytorchs_init_is_uniform_in_one_over_the_root_of_the_fan_in_biases_too():
    """SB3 with ortho_init=False keeps torch.nn.Linear's init: U(+-1/sqrt(fan_in)) for weights and biases."""
    networks, values, _ = built(orthogonal_init=False, plain_init="pytorch")
    policy = NumpyPolicy.from_values(values, len(networks.policy), "tanh")
    for kernel, bias in policy.policy + policy.value:
        bound = 1 / np.sqrt(kernel.shape[0])
        assert np.abs(kernel).max() <= bound and np.abs(bias).max() <= bound and bias.all()
    kernel = policy.policy[0][0]  # 5 x 32: enough draws to see the bound and a uniform's std
    bound = 1 / np.sqrt(OBS)
    assert np.abs(kernel).max() > 0.9 * bound
    assert abs(kernel.std() - bound / np.sqrt(3)) < 0.15 * bound / np.sqrt(3)


def test_a_plain_init_with_orthogonal_init_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"plain_init \(pytorch\) is the init without orthogonal_init"):
        TrainerConfig(plain_init="pytorch")


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_graphs_forward_pass_is_numpys(activation):
    rng = np.random.default_rng(0)
    layers = [(rng.normal(size=(OBS, 16)), rng.normal(size=16)), (rng.normal(size=(16, ACT)), rng.normal(size=ACT))]
    layers = [(kernel.astype(np.float32), bias.astype(np.float32)) for kernel, bias in layers]
    x = rng.normal(size=(64, OBS)).astype(np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        got = session.run(mlp_tf(tf.constant(x), [(tf.constant(k), tf.constant(b)) for k, b in layers], activation))
    np.testing.assert_allclose(got, mlp_np(x, layers, activation), rtol=1e-5, atol=1e-5)


def test_a_state_dependent_log_std_is_one_per_last_hidden_unit_and_action_and_acts_as_numpys():
    config = TrainerConfig(policy_layers=[32, 16], value_layers=[8], init_log_std=-2.0, exploration="state_dependent")
    x = np.random.default_rng(1).normal(size=(64, OBS)).astype(np.float32)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        networks = Networks.create(OBS, ACT, config)
        session.run(tf.compat.v1.global_variables_initializer())
        values = session.run(networks.variables())
        mean, log_std = networks.gaussian(tf.constant(x), config.activation)
        hidden = [v for layer in networks.policy[:-1] for v in layer]
        gradients = tf.gradients(tf.reduce_sum(log_std), [*hidden, networks.log_std, *networks.policy[-1]])
        got_mean, got_log_std = session.run([mean, log_std])
    policy = NumpyPolicy.from_values(values, len(config.policy_layers) + 1, config.activation)
    assert policy.log_std.shape == (16, ACT) and (policy.log_std == -2.0).all()
    want_mean, want_log_std = policy.gaussian(x)
    np.testing.assert_allclose(got_mean, want_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_log_std, want_log_std, rtol=1e-5, atol=1e-5)
    # The std trains log_std alone: no gradient reaches the hidden layers (gSDE without learn_features) and
    # none the mean's head.
    assert all(g is None for g in gradients[: len(hidden)]) and gradients[len(hidden)] is not None
    assert gradients[-2:] == [None, None]
