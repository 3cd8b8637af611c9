"""Streaming statistics against numpy over the concatenated data."""

import numpy as np
import pytest

from agents_operator.trainer.ppo.normalize import Moments, Normalizer, RewardScaler


def _chunks(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=[3.0, -1.0, 50.0], scale=[0.1, 2.0, 7.0], size=(n, 3)) for n in (1, 5, 17, 64, 3)]


@pytest.mark.parametrize("seed", range(3))
def test_streaming_moments_equal_numpy_on_concatenated_data(seed):
    chunks = _chunks(seed)
    normalizer = Normalizer((3,), clip=1e6)
    for i, chunk in enumerate(chunks):
        normalizer.observe(chunk)
        if i == 2:  # a push midway: the sums add up all the same
            normalizer.take_pending()
    normalizer.take_pending()
    everything = np.concatenate(chunks)
    np.testing.assert_allclose(normalizer.shared.mean, everything.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(normalizer.shared.var, everything.var(axis=0), rtol=1e-8)
    x = np.array([[3.0, 0.0, 40.0]])
    expected = (x - everything.mean(axis=0)) / np.sqrt(everything.var(axis=0) + 1e-8)
    np.testing.assert_allclose(normalizer.normalize(x), expected, rtol=1e-5, atol=1e-5)
    assert normalizer.normalize(x).dtype == np.float32


def test_statistics_stay_fixed_until_the_pending_sums_are_taken():
    a, b = _chunks(0)[2:4]
    normalizer = Normalizer((3,), clip=5.0)
    normalizer.observe(a)
    np.testing.assert_allclose(normalizer.normalize(a), np.clip(a, -5, 5), rtol=1e-6)  # no statistics yet
    pushed = normalizer.take_pending()
    assert pushed.count == len(a)
    np.testing.assert_allclose(pushed.sum, a.sum(axis=0))
    assert normalizer.take_pending().count == 0
    normalizer.observe(b)
    np.testing.assert_allclose(normalizer.normalize(a).mean(axis=0), 0.0, atol=1e-5)  # still a's statistics
    normalizer.shared = Moments.of(a) + Moments.of(b)  # as read back from the learner
    np.testing.assert_allclose(normalizer.mean, np.concatenate([a, b]).mean(axis=0), rtol=1e-6)


def test_normalized_values_are_clipped():
    normalizer = Normalizer((2,), clip=2.0)
    normalizer.observe(np.array([[0.0, 0.0], [2.0, 2.0]]))
    normalizer.take_pending()
    np.testing.assert_array_equal(normalizer.normalize(np.array([[100.0, -100.0]])), [[2.0, -2.0]])


def test_disabled_normalizer_passes_values_through():
    normalizer = Normalizer((2,), clip=1.0, enabled=False)
    normalizer.observe(np.array([[10.0, 10.0], [20.0, 30.0]]))
    normalizer.take_pending()
    np.testing.assert_array_equal(normalizer.normalize(np.array([[7.0, 8.0]])), [[7.0, 8.0]])


def test_rewards_are_divided_by_the_std_of_the_discounted_return_including_the_rollout():
    rng = np.random.default_rng(1)
    rewards = rng.normal(2.0, 1.0, size=(30, 2))
    done = np.zeros((30, 2), bool)
    done[9, 0] = done[20, 1] = True
    scaler = RewardScaler(2, discount=0.9, clip=1e6)
    returns, seen = np.zeros(2), []
    for t in range(30):
        scaler.track(rewards[t], done[t])
        returns = 0.9 * returns + rewards[t]
        seen.append(returns.copy())
        returns[done[t]] = 0.0
    expected = rewards / np.sqrt(np.var(seen) + 1e-8)
    np.testing.assert_allclose(scaler.scale(rewards), expected, rtol=1e-5)  # the rollout's own returns count
    scaler.statistics.take_pending()
    np.testing.assert_allclose(scaler.statistics.shared.mean, np.mean(seen))
    np.testing.assert_allclose(scaler.scale(rewards), expected, rtol=1e-5)


def test_per_step_statistics_start_from_what_is_pending_and_advance_with_every_step():
    """config observation_statistics "step": a rollout acts with the shared statistics plus what is pending
    (the run's first observations), then with each step's observations counted too; the copy that acts never
    pushes them (the trainer's normaliser counts the rollout once, `take_pending`)."""
    first, step, later = _chunks(1)[1:4]
    normalizer = Normalizer((3,), clip=1e6, per_step=True)
    normalizer.observe(first)  # the environments' first observations, before the first rollout
    acting = normalizer.snapshot()
    np.testing.assert_allclose(acting.mean, first.mean(axis=0), rtol=1e-6)
    acting.advance(step)
    everything = np.concatenate([first, step])
    np.testing.assert_allclose(acting.mean, everything.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(acting.std, np.sqrt(everything.var(axis=0) + 1e-8), rtol=1e-5)
    assert acting.pending.count == 0 and normalizer.shared.count == 0  # nothing to push from the copy
    assert normalizer.take_pending().count == len(first)
    normalizer.observe(later)  # the rollout's observations, counted after it (`to_batch`)
    assert normalizer.snapshot().shared.count == len(first) + len(later)


def test_statistics_fixed_per_rollout_ignore_what_is_pending_and_every_step():
    normalizer = Normalizer((3,), clip=1e6)
    normalizer.observe(_chunks(2)[2])
    acting = normalizer.snapshot()
    acting.advance(_chunks(2)[3])
    assert acting.shared.count == 0
    x = np.array([[3.0, 0.0, 40.0]])
    np.testing.assert_array_equal(acting.normalize(x), x.astype(np.float32))  # the first rollout: unnormalised
