"""A rollout's exploration noise (trainer/envs/noise.py): per step as the generator always drew it, or gSDE's
exploration weights held for `hold` steps; the rows of a group, the wire fields, and the checks a batch makes."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envs.noise import Noise, check_noise
from agents_operator.trainer.ppo.policy import NumpyPolicy


def policy(state_dependent: bool) -> NumpyPolicy:
    def layer(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((m, n), np.float32), np.zeros(n, np.float32)

    log_std = np.zeros((4, 2) if state_dependent else 2, np.float32)
    return NumpyPolicy([layer(3, 4), layer(4, 2)], log_std, [layer(3, 1)], "tanh")


def test_per_step_noise_is_drawn_as_the_samplers_always_drew_it() -> None:
    """Hold 1 keeps the generator's draws (and so every serial run) what they were."""
    noise = Noise.draw(np.random.default_rng(5), 7, 3, np.zeros(2, np.float32), hold=1)
    want = np.random.default_rng(5).standard_normal((7, 3, 2), dtype=np.float32)
    np.testing.assert_array_equal(noise.draws, want)
    assert (noise.steps, noise.hold, noise.held) == (7, 1, False)
    np.testing.assert_array_equal(noise.at(4, slice(1, 3)), want[4, 1:3])
    assert noise.to_message().keys() == {"noise"}


def test_held_weights_change_every_hold_steps_from_the_rollouts_start() -> None:
    noise = Noise.draw(np.random.default_rng(0), 10, 3, np.zeros((4, 2), np.float32), hold=4)
    assert noise.draws.shape == (3, 3, 4, 2) and noise.held  # steps 0-3, 4-7, 8-9
    for t, period in [(0, 0), (3, 0), (4, 1), (7, 1), (8, 2), (9, 2)]:
        np.testing.assert_array_equal(noise.at(t, slice(0, 3)), noise.draws[period])
    part = noise.rows(slice(1, 2))
    assert (part.draws.shape, part.steps, part.hold) == ((3, 1, 4, 2), 10, 4)
    np.testing.assert_array_equal(part.at(5, slice(0, 1)), noise.draws[1, 1:2])
    message = noise.to_message()
    assert (message["noise_steps"], message["noise_hold"]) == (10, 4) and message["noise"] is noise.draws


@pytest.mark.parametrize(
    ("draws", "steps", "hold", "error"),
    [
        (np.zeros((2, 3)), 2, 1, "3 or 4 axes"),
        (np.zeros((4, 3, 2)), 4, 2, "per step 1"),
        (np.zeros((3, 3, 4, 2)), 10, 3, "needs 4 draws, got 3"),
        (np.zeros((1, 3, 4, 2)), 0, 3, "at least 1"),
    ],
)
def test_noise_that_does_not_add_up_is_refused(draws: np.ndarray, steps: int, hold: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Noise(draws, steps, hold)


def test_a_batch_checks_its_noise_against_its_environments_and_policy() -> None:
    per_step = Noise.per_step(np.zeros((5, 3, 2), np.float32))
    held = Noise(np.zeros((2, 3, 4, 2), np.float32), 5, 3)
    check_noise(per_step, policy(False), 3, (2,))
    check_noise(per_step, policy(True), 3, (2,))
    check_noise(held, policy(True), 3, (2,))
    with pytest.raises(ValueError, match=r"need a state-dependent policy"):
        check_noise(held, policy(False), 3, (2,))
    with pytest.raises(ValueError, match=r"must have shape \(draws, 2, 4, 2\), got \(2, 3, 4, 2\)"):
        check_noise(held, policy(True), 2, (2,))
    with pytest.raises(ValueError, match=r"must have shape \(draws, 3, 1\), got \(5, 3, 2\)"):
        check_noise(per_step, policy(False), 3, (1,))
