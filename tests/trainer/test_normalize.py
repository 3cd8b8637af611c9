"""Streaming statistics against numpy over the concatenated data."""

import numpy as np
import pytest

from agents_operator.trainer.normalize import Moments, Normalizer, RewardScaler


def _chunks(seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=[3.0, -1.0, 50.0], scale=[0.1, 2.0, 7.0], size=(n, 3)) for n in (1, 5, 17, 64, 3)]


@pytest.mark.parametrize("seed", range(3))
def test_streaming_moments_equal_numpy_on_concatenated_data(seed):
    chunks = _chunks(seed)
    normalizer = Normalizer((3,), clip=1e6)
    for i, chunk in enumerate(chunks):
        normalizer.observe(chunk)
        if i == 2:  # pushing midway changes nothing locally
            normalizer.take_pending()
    everything = np.concatenate(chunks)
    np.testing.assert_allclose(normalizer.moments.mean, everything.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(normalizer.moments.var, everything.var(axis=0), rtol=1e-8)
    x = np.array([[3.0, 0.0, 40.0]])
    expected = (x - everything.mean(axis=0)) / np.sqrt(everything.var(axis=0) + 1e-8)
    np.testing.assert_allclose(normalizer.normalize(x), expected, rtol=1e-5)
    assert normalizer.normalize(x).dtype == np.float32


def test_pending_sums_are_handed_over_once_and_moments_add():
    a, b = _chunks(0)[2:4]
    normalizer = Normalizer((3,), clip=5.0)
    normalizer.observe(a)
    pushed = normalizer.take_pending()
    assert pushed.count == len(a)
    assert normalizer.take_pending().count == 0
    total = Moments.of(a) + Moments.of(b)
    np.testing.assert_allclose(total.mean, np.concatenate([a, b]).mean(axis=0))


def test_normalized_values_are_clipped_and_empty_statistics_are_the_identity():
    normalizer = Normalizer((2,), clip=2.0)
    np.testing.assert_array_equal(normalizer.normalize(np.array([[0.5, -1.0]])), [[0.5, -1.0]])
    normalizer.observe(np.array([[0.0, 0.0], [2.0, 2.0]]))
    np.testing.assert_array_equal(normalizer.normalize(np.array([[100.0, -100.0]])), [[2.0, -2.0]])


def test_disabled_normalizer_passes_values_through():
    normalizer = Normalizer((2,), clip=1.0, enabled=False)
    normalizer.observe(np.array([[10.0, 10.0], [20.0, 30.0]]))
    np.testing.assert_array_equal(normalizer.normalize(np.array([[7.0, 8.0]])), [[7.0, 8.0]])


def test_rewards_are_divided_by_the_std_of_the_discounted_return():
    rng = np.random.default_rng(1)
    rewards = rng.normal(2.0, 1.0, size=(30, 2))
    done = np.zeros((30, 2), bool)
    done[9, 0] = done[20, 1] = True
    scaler = RewardScaler(2, discount=0.9, clip=1e6)
    returns, seen, scaled = np.zeros(2), [], []
    for t in range(30):
        scaled.append(scaler(rewards[t], done[t]))
        returns = 0.9 * returns + rewards[t]
        seen.append(returns.copy())
        returns[done[t]] = 0.0
    np.testing.assert_allclose(scaled[-1], rewards[-1] / np.sqrt(np.var(seen) + 1e-8), rtol=1e-5)
    np.testing.assert_allclose(scaler.statistics.moments.mean, np.mean(seen))
