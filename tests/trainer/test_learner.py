"""The learner graph (trainer/learner.py): numpy actor == TF graph, counters, KL penalty."""

import dataclasses

import numpy as np
import pytest

from agents_operator.trainer.learner import Learner
from agents_operator.trainer.ppo.normalize import Moments
from tests.trainer.learners import ACT, OBS, batch_for, small_config


def test_numpy_actor_matches_the_graph_and_init_is_orthogonal(learner):
    state = learner.initialize()
    batch = batch_for(state)
    # KL between the numpy actor's Gaussians and the graph's on the same weights: zero if they agree.
    _, finish = learner.finish_iteration(batch, 0, Moments.zeros((OBS,)), Moments.zeros(()))
    assert finish["kl"] == pytest.approx(0.0, abs=1e-6)
    kernel = state.policy.policy[0][0]  # (3, 16): orthonormal rows times sqrt(2)
    np.testing.assert_allclose(kernel @ kernel.T, 2.0 * np.eye(OBS), atol=1e-5)
    assert np.all(state.policy.log_std == 0.0)


def test_update_and_finish_count_steps_and_push_statistics(learner):
    state = learner.initialize()
    batch = batch_for(state)
    metrics = learner.update(batch, np.random.default_rng(0))
    assert set(metrics) >= {"policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "learning_rate"}
    assert metrics["clip_range"] == pytest.approx(0.2)  # the constant clip_schedule: clip_range throughout
    observations = Moments.of(np.ones((5, OBS)))
    state, finish = learner.finish_iteration(batch, 32, observations, Moments.of(np.arange(4.0)))
    # one push of the iteration's change to the shared weights: one global step
    assert (state.global_step, state.env_steps, state.iterations) == (1, 32, 1)
    assert state.observation_moments.count == 5
    assert state.return_moments.sum == 6.0
    assert finish["kl"] > 0
    # the linear schedule anneals by the env steps counted so far: 32 of 1M
    second = learner.update(batch, np.random.default_rng(1))
    assert second["learning_rate"] == pytest.approx(3e-4 * (1 - 32 / 1_000_000))


def test_the_linear_clip_schedule_anneals_the_surrogates_epsilon_by_the_env_steps():
    learner = Learner(small_config(clip_range=0.3, clip_schedule="linear", total_steps=64), OBS, ACT)
    try:
        state = learner.initialize()
        batch = batch_for(state)
        assert learner.update(batch, np.random.default_rng(0))["clip_range"] == pytest.approx(0.3)
        learner.finish_iteration(batch, 48, Moments.zeros((OBS,)), Moments.zeros(()))
        later = learner.update(batch, np.random.default_rng(0))
        assert later["clip_range"] == pytest.approx(0.3 * (1 - 48 / 64))
        # at total_steps it reaches zero
        learner.finish_iteration(batch, 16, Moments.zeros((OBS,)), Moments.zeros(()))
        assert learner.update(batch, np.random.default_rng(0))["clip_range"] == 0.0
    finally:
        learner.close()


def test_the_linear_clip_schedule_holds_the_floor_once_it_anneals_down_to_it():
    config = small_config(clip_range=0.4, clip_schedule="linear", clip_range_floor=0.2, total_steps=64)
    learner = Learner(config, OBS, ACT)
    try:
        state = learner.initialize()
        batch = batch_for(state)
        learner.finish_iteration(batch, 16, Moments.zeros((OBS,)), Moments.zeros(()))
        # above the floor it anneals as without one
        assert learner.update(batch, np.random.default_rng(0))["clip_range"] == pytest.approx(0.4 * (1 - 16 / 64))
        learner.finish_iteration(batch, 24, Moments.zeros((OBS,)), Moments.zeros(()))
        assert learner.update(batch, np.random.default_rng(0))["clip_range"] == pytest.approx(0.2)  # 0.15 annealed
        # and holds it to total_steps and past it
        learner.finish_iteration(batch, 32, Moments.zeros((OBS,)), Moments.zeros(()))
        assert learner.update(batch, np.random.default_rng(0))["clip_range"] == pytest.approx(0.2)
    finally:
        learner.close()


def test_the_linear_entropy_schedule_anneals_the_bonus_weight_by_the_env_steps():
    learner = Learner(small_config(entropy_coef=0.02, entropy_schedule="linear", total_steps=64), OBS, ACT)
    try:
        state = learner.initialize()
        batch = batch_for(state)
        first = learner.update(batch, np.random.default_rng(0))
        assert first["entropy_coef"] == pytest.approx(0.02)
        learner.finish_iteration(batch, 48, Moments.zeros((OBS,)), Moments.zeros(()))
        assert learner.update(batch, np.random.default_rng(0))["entropy_coef"] == pytest.approx(0.02 * (1 - 48 / 64))
        learner.finish_iteration(batch, 16, Moments.zeros((OBS,)), Moments.zeros(()))
        assert learner.update(batch, np.random.default_rng(0))["entropy_coef"] == 0.0
    finally:
        learner.close()


def test_kl_penalty_coefficient_adapts():
    learner = Learner(small_config(objective="kl_penalty", learning_rate=0.1, kl_init_penalty=1.0), OBS, ACT)
    try:
        state = learner.initialize()
        batch = batch_for(state)
        learner.update(batch, np.random.default_rng(0))
        state, finish = learner.finish_iteration(batch, 32, Moments.zeros((OBS,)), Moments.zeros(()))
        assert finish["kl"] > 1.3 * 0.01
        assert state.kl_beta == pytest.approx(1.5)
    finally:
        learner.close()


def test_an_update_whose_change_is_not_finite_leaves_the_shared_weights_and_the_next_update_learns(learner, caplog):
    state = learner.initialize()
    batch = batch_for(state)
    poisoned = dataclasses.replace(batch, returns=np.full_like(batch.returns, np.nan))
    metrics = learner.update(poisoned, np.random.default_rng(0))
    assert metrics["discarded_updates"] == 1
    assert "not finite" in caplog.text
    after, _ = learner.finish_iteration(batch, 32, Moments.zeros((OBS,)), Moments.zeros(()))
    for before, now in zip(_weights(state), _weights(after), strict=True):
        np.testing.assert_array_equal(before, now)
    assert after.global_step == 1  # the push was counted, with no change
    # the local Adam, whose moments held the NaN, started afresh: the next update learns
    healthy = learner.update(batch, np.random.default_rng(1))
    assert healthy["discarded_updates"] == 1 and np.isfinite(healthy["grad_norm"])
    learned, _ = learner.finish_iteration(batch, 32, Moments.zeros((OBS,)), Moments.zeros(()))
    assert all(np.isfinite(w).all() for w in _weights(learned))
    assert any((b != w).any() for b, w in zip(_weights(state), _weights(learned), strict=True))


def _weights(state) -> list[np.ndarray]:
    policy = state.policy
    layers = [w for layer in policy.policy for w in layer], [w for layer in policy.value for w in layer]
    return [*layers[0], policy.log_std, *layers[1]]
