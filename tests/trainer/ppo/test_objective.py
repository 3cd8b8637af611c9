"""The PPO objective, built alone on constants: how it weighs its pieces, for both policy objectives."""

import math

import numpy as np
import pytest
import tensorflow as tf

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo.objective import ppo_objective
from agents_operator.trainer.ppo.policy import gaussian_log_prob_np

ACTIONS = np.array([[0.5], [-1.0], [2.0], [0.0]], np.float32)
MEANS = np.array([[0.0], [0.0], [1.0], [0.5]], np.float32)
LOG_STD = np.array([-0.5], np.float32)
ADVANTAGES = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
VALUES = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
RETURNS = np.array([1.0, 1.0, 0.0, 3.0], np.float32)


def _evaluate(
    config: TrainerConfig,
    mean: np.ndarray,
    log_std: np.ndarray,
    beta: float = 1.0,
    proximal: np.ndarray | None = None,
    entropy_coef: float | None = None,
) -> dict:
    """The objective's loss, per-sample KL and metrics for a policy N(mean, exp(log_std)^2) trained on a batch
    that the policy N(MEANS, exp(LOG_STD)^2) acted in; with `proximal` means, the update started from
    N(proximal, exp(LOG_STD)^2) (overlapped sampling's `proximal_log_probs`); `entropy_coef` is the bonus's
    weight after its schedule (default: the config's)."""
    batch = _batch(ACTIONS, LOG_STD, proximal)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        objective = ppo_objective(
            config,
            {name: tf.constant(value) for name, value in batch.items()},
            tf.constant(mean),
            tf.constant(log_std),
            tf.constant(VALUES),
            tf.constant(beta),
            config.clip_range,
            config.entropy_coef if entropy_coef is None else entropy_coef,
        )
        return session.run({"loss": objective.loss, "kl": objective.kl, **objective.metrics})


def _batch(actions: np.ndarray, log_std: np.ndarray, proximal: np.ndarray | None) -> dict[str, np.ndarray]:
    """A batch of `actions` that N(MEANS, exp(`log_std`)^2) acted; with `proximal` means, the update started from
    N(proximal, exp(`log_std`)^2)."""
    batch = {
        "actions": actions,
        "log_probs": gaussian_log_prob_np((actions - MEANS) * np.exp(-log_std), log_std),
        "means": MEANS,
        "log_std": log_std,
        "values": VALUES,
        "advantages": ADVANTAGES,
        "returns": RETURNS,
    }
    if proximal is not None:
        batch["proximal_log_probs"] = gaussian_log_prob_np((actions - proximal) * np.exp(-log_std), log_std)
    return batch


@pytest.mark.parametrize("objective", ["clip", "kl_penalty"])
def test_unchanged_policy_weighs_policy_value_and_entropy_as_configured(objective):
    config = TrainerConfig(env_id="Pendulum-v1", objective=objective, value_coef=0.5, entropy_coef=0.01)
    out = _evaluate(config, MEANS, LOG_STD)
    # ratio 1, KL 0: both policy losses are -E[A] of the standardised advantages, i.e. 0.
    assert out["kl"] == pytest.approx(np.zeros(4), abs=1e-6)
    assert out["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert out["clipfrac"] == 0.0
    assert out["policy_loss"] == pytest.approx(0.0, abs=1e-6)
    assert out["value_loss"] == pytest.approx(0.5 * np.mean((VALUES - RETURNS) ** 2))
    entropy = float(LOG_STD[0]) + 0.5 * math.log(2 * math.pi * math.e)
    assert out["entropy"] == pytest.approx(entropy)
    assert out["loss"] == pytest.approx(0.5 * out["value_loss"] - 0.01 * entropy)


def test_the_entropy_bonus_weighs_by_its_weight_now_not_the_configs():
    config = TrainerConfig(env_id="Pendulum-v1", value_coef=0.5, entropy_coef=0.01, entropy_schedule="linear")
    annealed = _evaluate(config, MEANS, LOG_STD, entropy_coef=0.0025)
    assert annealed["loss"] == pytest.approx(0.5 * annealed["value_loss"] - 0.0025 * annealed["entropy"])


def test_advantages_unstandardised_and_clipped_ratio():
    config = TrainerConfig(env_id="Pendulum-v1", normalize_advantages=False, clip_range=0.2, value_coef=0.0)
    moved = MEANS + 0.5  # shifts every ratio away from 1
    out = _evaluate(config, moved, LOG_STD)
    new = gaussian_log_prob_np((ACTIONS - moved) * np.exp(-LOG_STD), LOG_STD)
    old = gaussian_log_prob_np((ACTIONS - MEANS) * np.exp(-LOG_STD), LOG_STD)
    ratio = np.exp(new - old)
    expected = np.mean(np.maximum(-ADVANTAGES * ratio, -ADVANTAGES * np.clip(ratio, 0.8, 1.2)))
    assert out["policy_loss"] == pytest.approx(expected, rel=1e-5)
    assert out["clipfrac"] == pytest.approx(np.mean(np.abs(ratio - 1) > 0.2))
    assert out["kl"] == pytest.approx(np.full(4, 0.5 * 0.5**2 / np.exp(2 * LOG_STD[0])), rel=1e-5)


def test_kl_penalty_weighs_the_kl_with_beta():
    config = TrainerConfig(env_id="Pendulum-v1", objective="kl_penalty", normalize_advantages=False)
    moved = MEANS + 0.1
    low, high = (_evaluate(config, moved, LOG_STD, beta) for beta in (1.0, 3.0))
    assert high["policy_loss"] - low["policy_loss"] == pytest.approx(2.0 * np.mean(low["kl"]), rel=1e-4)


@pytest.mark.parametrize("objective", ["clip", "kl_penalty"])
def test_a_proximal_policy_equal_to_the_behaviour_changes_nothing(objective):
    config = TrainerConfig(env_id="Pendulum-v1", objective=objective, normalize_advantages=False)
    moved = MEANS + np.array([[0.3], [-0.2], [0.1], [0.4]], np.float32)
    plain, decoupled = _evaluate(config, moved, LOG_STD), _evaluate(config, moved, LOG_STD, proximal=MEANS)
    for name, value in plain.items():
        assert decoupled[name] == pytest.approx(value, rel=1e-6, abs=1e-7), name


def test_with_a_proximal_policy_the_clip_is_around_it_and_the_samples_are_weighed_by_it_over_the_behaviour():
    """Decoupled PPO: -mean(w * min(r A, clip(r) A)), r = pi / pi_prox, w = pi_prox / pi_behaviour."""
    config = TrainerConfig(env_id="Pendulum-v1", normalize_advantages=False, clip_range=0.2)
    proximal = MEANS + np.array([[0.2], [0.1], [-0.3], [0.0]], np.float32)
    moved = proximal + np.array([[0.05], [-0.4], [0.02], [0.3]], np.float32)
    out = _evaluate(config, moved, LOG_STD, proximal=proximal)

    def log_prob(means: np.ndarray) -> np.ndarray:
        return gaussian_log_prob_np((ACTIONS - means) * np.exp(-LOG_STD), LOG_STD).astype(np.float64)

    ratio = np.exp(log_prob(moved) - log_prob(proximal))
    weights = np.exp(log_prob(proximal) - log_prob(MEANS))
    surrogate = np.minimum(ratio * ADVANTAGES, np.clip(ratio, 0.8, 1.2) * ADVANTAGES)
    assert out["policy_loss"] == pytest.approx(-np.mean(weights * surrogate), rel=1e-5)
    assert out["clipfrac"] == np.mean(np.abs(ratio - 1) > 0.2)
    assert 0 < out["clipfrac"] < 1 and not np.allclose(weights, 1.0)
    # The KL is still the behaviour's (it adapts the penalty and is logged as policy/kl).
    behaviour = _evaluate(config, moved, LOG_STD)
    np.testing.assert_allclose(out["kl"], behaviour["kl"], rtol=1e-6)


@pytest.mark.parametrize("objective", ["clip", "kl_penalty"])
def test_a_narrow_policy_far_from_its_proximal_one_still_has_finite_gradients(objective):
    """Late in a run the std is small (pendulum's reaches 0.015), and the proximal policy an async worker pulls
    after a ps came back from an older checkpoint may sit 30 stds from the one that acted. Its weights
    pi_prox / pi_behaviour then underflow to 0 while a slightly wider policy makes the ratio pi / pi_prox
    overflow: 0 x inf is NaN, and one NaN gradient makes every weight NaN once pushed."""
    config = TrainerConfig(env_id="Pendulum-v1", objective=objective, normalize_advantages=False)
    narrow = np.array([-4.2], np.float32)
    actions = MEANS + np.float32(0.015) * np.array([[0.3], [-1.1], [0.7], [2.0]], np.float32)
    proximal = MEANS + np.float32(0.45)
    batch = _batch(actions, narrow, proximal)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        mean, log_std = tf.Variable(proximal), tf.Variable(narrow + np.float32(0.2))
        out = ppo_objective(
            config,
            {name: tf.constant(value) for name, value in batch.items()},
            mean,
            log_std,
            tf.constant(VALUES),
            tf.constant(1.0),
            config.clip_range,
            config.entropy_coef,
        )
        gradients = tf.gradients(out.loss, [mean, log_std])
        session.run(tf.compat.v1.global_variables_initializer())
        loss, metrics, grads = session.run([out.loss, out.metrics, gradients])
    assert np.isfinite(loss)
    assert all(np.isfinite(value) for value in metrics.values()), metrics
    assert all(np.isfinite(g).all() for g in grads), grads
