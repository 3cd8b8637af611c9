"""The PPO loss pieces against hand computations."""

import math

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.trainer.ppo import losses
from agents_operator.trainer.ppo.policy import gaussian_log_prob_np


@pytest.fixture(scope="module")
def run():
    """Evaluate a function of constant tensors in graph mode."""
    sessions = []

    def evaluate(fn, *args):
        graph = tf.Graph()
        with graph.as_default():
            tensors = [tf.constant(np.asarray(a, np.float32)) for a in args]
            out = fn(*tensors)
        session = tf.compat.v1.Session(graph=graph)
        sessions.append(session)
        return session.run(out)

    yield evaluate
    for session in sessions:
        session.close()


def test_clipped_surrogate(run):
    ratio, advantages = [0.5, 1.0, 1.5], [1.0, -1.0, 1.0]
    # pg_loss1 = -A r = [-0.5, 1, -1.5]; pg_loss2 = -A clip(r, 0.8, 1.2) = [-0.8, 1, -1.2]; max = [-0.5, 1, -1.2]
    pg_loss, clipfrac = run(lambda r, a: losses.clipped_surrogate(r, a, 0.2), ratio, advantages)
    assert pg_loss == pytest.approx((-0.5 + 1.0 - 1.2) / 3)
    assert clipfrac == pytest.approx(2 / 3)


def test_kl_penalty_with_quadratic_cutoff(run):
    ratio, advantages, kl = [1.0, 2.0], [1.0, 0.5], [0.0, 0.05]
    loss = run(lambda r, a, k, b: losses.kl_penalty(r, a, k, b, 0.01, 2.0, 1000.0), ratio, advantages, kl, 2.0)
    surrogate = -(1.0 * 1.0 + 2.0 * 0.5) / 2
    penalty = 2.0 * 0.025
    cutoff = 1000.0 * (0.05 - 0.02) ** 2 / 2
    assert loss == pytest.approx(surrogate + penalty + cutoff)


@pytest.mark.parametrize(("kl", "expected"), [(0.02, 3.0), (0.005, 2.0 / 1.5), (0.01, 2.0), (0.0129, 2.0)])
def test_adaptive_kl_beta(run, kl, expected):
    assert run(lambda b, k: losses.adapted_kl_beta(b, k, 0.01), 2.0, kl) == pytest.approx(expected)


def test_value_loss_plain_and_clipped(run):
    values, old_values, returns = [1.0, 0.0], [0.0, 0.0], [3.0, -1.0]
    plain = run(lambda v, o, r: losses.value_loss(v, o, r, None), values, old_values, returns)
    assert plain == pytest.approx(0.5 * (4.0 + 1.0) / 2)
    # clipped to old +- 0.5: [0.5, 0.0] -> squared errors [6.25, 1.0]; max with [4, 1] -> [6.25, 1]
    clipped = run(lambda v, o, r: losses.value_loss(v, o, r, 0.5), values, old_values, returns)
    assert clipped == pytest.approx(0.5 * (6.25 + 1.0) / 2)


def test_gaussian_log_prob_entropy_and_kl(run):
    actions, mean, log_std = [[1.0, -2.0]], [[0.0, 0.0]], [0.0, math.log(2.0)]
    log_prob = run(losses.gaussian_log_prob, actions, mean, log_std)
    expected = -0.5 * 1.0 - 0.5 * math.log(2 * math.pi) + (-0.5 * 1.0 - math.log(2.0) - 0.5 * math.log(2 * math.pi))
    assert log_prob[0] == pytest.approx(expected)
    noise = (np.array(actions) - np.array(mean)) / np.exp(log_std)
    assert gaussian_log_prob_np(noise, np.array(log_std))[0] == pytest.approx(expected)
    entropy = run(losses.gaussian_entropy, log_std)
    assert entropy == pytest.approx(2 * 0.5 * math.log(2 * math.pi * math.e) + math.log(2.0))
    # KL(N(0, 1) || N(1, 2^2)) = log 2 + (1 + 1) / 8 - 1/2, one dimension
    kl = run(losses.gaussian_kl, [[0.0]], [0.0], [[1.0]], [math.log(2.0)])
    assert kl[0] == pytest.approx(math.log(2.0) + 2.0 / 8.0 - 0.5)


def test_a_state_dependent_gaussian_has_per_sample_log_probs_kl_and_the_mean_entropy(run):
    """gSDE's std differs per sample: log N and the KL take a (batch, act_dim) log-std, the entropy is the
    batch's mean of each sample's."""
    log_std = [[0.0, math.log(2.0)], [math.log(0.5), 0.0]]
    log_prob = run(losses.gaussian_log_prob, [[1.0, -2.0], [1.0, -2.0]], [[0.0, 0.0], [0.0, 0.0]], log_std)
    per_dim = -0.5 * np.square(np.array([[1.0, -1.0], [2.0, -2.0]])) - np.array(log_std) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(log_prob, per_dim.sum(axis=1), rtol=1e-6)
    entropy = run(losses.gaussian_entropy, log_std)
    each = [math.log(2.0) + math.log(2 * math.pi * math.e), math.log(0.5) + math.log(2 * math.pi * math.e)]
    assert entropy == pytest.approx(np.mean(each))
    kl = run(losses.gaussian_kl, [[0.0], [0.0]], [[0.0], [math.log(2.0)]], [[1.0], [1.0]], [[math.log(2.0)], [0.0]])
    np.testing.assert_allclose(kl, [math.log(2.0) + 2.0 / 8.0 - 0.5, -math.log(2.0) + 5.0 / 2.0 - 0.5], rtol=1e-6)


def test_approx_kl(run):
    log_ratio = [0.1, -0.2]
    expected = np.mean(np.exp(log_ratio) - 1.0 - np.array(log_ratio))
    assert run(losses.approx_kl, log_ratio) == pytest.approx(expected, rel=1e-5)


def test_clipped_surrogate_is_pessimistic_for_negative_advantages(run):
    # eq. 7 takes min(r A, clip(r) A): with A < 0 the clip binds below 1 - eps, and a ratio above 1 + eps is not
    # clipped at all. ratio [0.5, 1.5], A = [-2, -2], eps = 0.2:
    # -A r = [1, 3]; -A clip(r, 0.8, 1.2) = [1.6, 2.4]; max = [1.6, 3] -> mean 2.3; both ratios left [0.8, 1.2].
    pg_loss, clipfrac = run(lambda r, a: losses.clipped_surrogate(r, a, 0.2), [0.5, 1.5], [-2.0, -2.0])
    assert pg_loss == pytest.approx(2.3)
    assert clipfrac == pytest.approx(1.0)


def test_value_loss_clipped_keeps_the_larger_error(run):
    # V = [2, -3], old V = [0, 0], R = [1, 0], clip 1: clipped V = [1, -1] -> errors [0, 1]; unclipped [1, 9];
    # max = [1, 9] -> 0.5 * mean = 2.5 (clipping only ever raises the loss).
    loss = run(lambda v, o, r: losses.value_loss(v, o, r, 1.0), [2.0, -3.0], [0.0, 0.0], [1.0, 0.0])
    assert loss == pytest.approx(2.5)
