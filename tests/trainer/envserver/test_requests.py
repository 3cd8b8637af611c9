"""Every request an env server takes, checked and bounded (envserver/requests.py): bad actions, rollouts and
evaluations past the limits, renders too large; each refused in one line naming the field, the session kept."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError
from agents_operator.trainer.envserver.requests import Limits
from tests.trainer.envserver.servers import FAST, Raw, evaluation, normalizer, refusal, serving
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(60)


def test_bad_actions_are_refused_and_the_session_survives() -> None:
    """NaN, infinity, a wrong shape or dtype, no actions: each refused with one line naming the field, and the
    batch then steps exactly like a local one that never saw them (finite actions out of bounds are clipped)."""
    good = np.array([[0.5], [-3.0]], np.float32)
    with (
        serving("Pendulum-v1", 2, seed=1) as address,
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=1) as local,
    ):
        raw = Raw(address)
        reply = raw.call("Reset", {})
        np.testing.assert_array_equal(reply["observations"], local.reset())
        session = reply["session"]
        bad = {
            "actions[1, 0] is nan": np.array([[0.0], [np.nan]], np.float32),
            "actions[0, 0] is inf": np.array([[np.inf], [0.0]]),
            "actions: shape (3, 1), expected (2, 1)": np.zeros((3, 1), np.float32),
            "actions: must be an array of numbers, got an array of dtype bool": np.zeros((2, 1), bool),
        }
        for expected, actions in bad.items():
            assert expected in refusal(raw, "Step", {"actions": actions, "session": session})
        assert "actions: must be an array of numbers, got nothing" in refusal(raw, "Step", {"session": session})
        got, want = raw.call("Step", {"actions": good, "session": session}), local.step(good)
        for name, value in vars(want).items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_collect_and_evaluate_requests_are_bounded_and_checked() -> None:
    limits = Limits(max_episodes=5, max_rollout_steps=10)
    with serving("Pendulum-v1", 1, limits=limits) as address:
        raw = Raw(address)
        session = raw.call("Reset", {})["session"]
        collect = {**evaluation(1), "session": session}
        noise = np.zeros((11, 1, 1), np.float32)
        assert "noise: 11 steps, must be 1 to 10 (max_rollout_steps)" in refusal(
            raw, "Collect", {**collect, "noise": noise}
        )
        noise[3, 0, 0] = np.nan
        assert "noise[3, 0, 0] is nan" in refusal(raw, "Collect", {**collect, "noise": noise[:10]})
        weights = list(collect["weights"])
        weights[2] = np.full_like(weights[2], np.inf)
        assert "weights[2][0, 0] is inf" in refusal(raw, "Collect", {**collect, "weights": weights, "noise": noise[:3]})
        weights = list(collect["weights"])
        weights[0] = np.zeros((4, 16), np.float32)  # Pendulum observes 3 numbers
        assert "weights: policy layer 0 has a kernel of shape (4, 16) and a bias of shape (16,); it must take 3" in (
            refusal(raw, "Collect", {**collect, "weights": weights, "noise": noise[:3]})
        )
        moments = [1.0, np.zeros(2), np.ones(3)]
        assert "observation_moments.sum: shape (2,), expected (3,)" in refusal(
            raw, "Collect", {**collect, "observation_moments": moments, "noise": noise[:3]}
        )
        assert "episodes: 6, must be an integer from 1 to 5 (max_episodes)" in refusal(raw, "Evaluate", evaluation(6))
        assert "seed: -1, must be a non-negative integer" in refusal(raw, "Evaluate", evaluation(1, seed=-1))
        rollout = raw.call("Collect", {**collect, "noise": np.zeros((3, 1, 1), np.float32)})  # the session lives
        assert rollout["rewards"].shape == (3, 1)


def test_rendering_more_than_the_server_may_hold_is_refused() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    with (
        serving("Pendulum-v1", 1, max_episode_steps=30, limits=Limits(max_render_bytes=10 << 20)) as address,
        RemoteBatchEnv([address], **FAST) as remote,
        pytest.raises(EnvServerError, match=r"INVALID_ARGUMENT: Render: render: .* max_render_bytes 10485760"),
    ):
        remote.run_episodes(policy, normalizer(), 1, 0, on_frame=lambda frame: None)


def test_a_state_dependent_log_std_is_served_when_it_fits_the_last_hidden_layer() -> None:
    """gSDE's log-std, (last hidden width, act_dim): a rollout is collected with it; another shape is refused."""
    with serving("Pendulum-v1", 1) as address:
        raw = Raw(address)
        collect = {**evaluation(1), "session": raw.call("Reset", {})["session"], "noise": np.zeros((3, 1, 1))}
        weights = list(collect["weights"])
        at = 2 * collect["num_policy_layers"]  # the log-std, after the policy's kernels and biases
        width = weights[at - 2].shape[0]
        weights[at] = np.full((width, 1), -1.0, np.float32)
        rollout = raw.call("Collect", {**collect, "weights": weights})
        assert rollout["rewards"].shape == (3, 1)
        weights[at] = np.full((width + 1, 1), -1.0, np.float32)
        assert f"log_std: shape ({width + 1}, 1), expected ({width}, 1)" in refusal(
            raw, "Collect", {**collect, "weights": weights}
        )


def test_held_exploration_weights_are_checked_against_the_policy_and_their_steps() -> None:
    """Held weights (noise_steps, noise_hold, `envs.noise`): a state-dependent policy's are collected; for a
    state-independent policy, with steps that are no positive integer or weights of another shape, refused."""
    with serving("Pendulum-v1", 1, limits=Limits(max_rollout_steps=10)) as address:
        raw = Raw(address)
        collect = {**evaluation(1), "session": raw.call("Reset", {})["session"]}
        held = {"noise": np.zeros((2, 1, 16, 1), np.float32), "noise_steps": 5, "noise_hold": 3}
        assert "noise_hold: held exploration weights need a state-dependent policy" in refusal(
            raw, "Collect", {**collect, **held}
        )
        weights = list(collect["weights"])
        at = 2 * collect["num_policy_layers"]
        weights[at] = np.full((weights[at - 2].shape[0], 1), -1.0, np.float32)
        gsde = {**collect, "weights": weights}
        assert "noise_steps: 0, must be a positive integer" in refusal(
            raw, "Collect", {**gsde, **held, "noise_steps": 0}
        )
        assert "noise_hold: '3', must be a positive integer" in refusal(
            raw, "Collect", {**gsde, **held, "noise_hold": "3"}
        )
        assert "noise: shape (2, 1, 16, 1), expected (1, 1, 16, 1)" in refusal(
            raw, "Collect", {**gsde, **held, "noise_steps": 3}
        )
        assert "noise: 12 steps, must be 1 to 10" in refusal(
            raw, "Collect", {**gsde, **held, "noise": np.zeros((4, 1, 16, 1), np.float32), "noise_steps": 12}
        )
        assert raw.call("Collect", {**gsde, **held})["rewards"].shape == (5, 1)
