"""What an env server refuses and bounds: bad requests, long calls, other clients, large frames, busy threads."""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import grpc
import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.envs.policy_message import policy_message
from agents_operator.trainer.envserver import protocol, server
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError
from agents_operator.trainer.envserver.requests import Limits
from agents_operator.trainer.ppo.normalize import Normalizer

from .test_envserver import FAST, ROLLOUT_CONFIG, ServerProcess, random_policy, serving

pytestmark = pytest.mark.timeout(60)

LONG = 1000  # episodes of Pendulum (200 steps each): an evaluation of many seconds


class Raw:
    """The service called by hand, as a client other than RemoteBatchEnv (or a broken one) calls it."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)

    def call(self, method: str, message: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        return protocol.decode(self._callable(method)(protocol.encode(message), timeout=timeout))

    def future(self, method: str, message: dict[str, Any], timeout: float) -> grpc.Future:
        return self._callable(method).future(protocol.encode(message), timeout=timeout)

    def healthy(self, timeout: float) -> bool:
        check = self.channel.unary_unary(f"/{protocol.HEALTH_SERVICE}/{protocol.HEALTH_METHOD}")
        return check(b"", timeout=timeout) == protocol.HEALTH_SERVING

    def _callable(self, method: str) -> grpc.UnaryUnaryMultiCallable:
        return self.channel.unary_unary(protocol.method_path(method))


def normalizer() -> Normalizer:
    return Normalizer((3,), ROLLOUT_CONFIG.clip_observations)


def evaluation(episodes: int, seed: int = 0) -> dict[str, Any]:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    return {**policy_message(policy, normalizer()), "episodes": episodes, "seed": seed}


def refusal(raw: Raw, method: str, message: dict[str, Any]) -> str:
    """The details of the INVALID_ARGUMENT with which the server refuses `message`."""
    with pytest.raises(grpc.RpcError) as refused:
        raw.call(method, message)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    details = refused.value.details()
    assert "\n" not in details
    return details


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


def test_the_client_gets_a_refusal_at_once_as_an_error() -> None:
    with serving("Pendulum-v1", 1) as address, RemoteBatchEnv([address], **FAST) as env:
        env.reset()
        started = time.monotonic()
        with pytest.raises(EnvServerError, match=r"INVALID_ARGUMENT: Step: actions\[0, 0\] is nan"):
            env.step(np.full((1, 1), np.nan))
        assert time.monotonic() - started < 2  # not retried


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


def test_a_deadline_stops_an_evaluation_and_frees_the_environments(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, server.__name__)
    with serving("Pendulum-v1", 1) as address:
        raw = Raw(address)
        with pytest.raises(grpc.RpcError) as expired:
            raw.call("Evaluate", evaluation(LONG), timeout=0.5)
        assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        started = time.monotonic()
        raw.call("Reset", {}, timeout=5)
        assert time.monotonic() - started < 2
    assert "Evaluate stopped: its call ended" in caplog.text and "failed" not in caplog.text  # no traceback


def test_a_deadline_stops_a_rollout_and_the_next_reset_makes_fresh_environments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, server.__name__)
    steps = 2_000_000  # Pendulum acting in the worker: many seconds of rollout
    with serving("Pendulum-v1", 1, limits=Limits(max_rollout_steps=steps)) as address:
        raw = Raw(address)
        session = raw.call("Reset", {})["session"]
        collect = {**evaluation(1), "session": session, "noise": np.zeros((steps, 1, 1), np.float32)}
        with pytest.raises(grpc.RpcError) as expired:
            raw.call("Collect", collect, timeout=1.0)
        assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        started = time.monotonic()
        session = raw.call("Reset", {"session": session}, timeout=10)["session"]
        assert time.monotonic() - started < 3  # not after the rollout: its workers were killed
        rollout = raw.call("Collect", {**collect, "session": session, "noise": np.zeros((3, 1, 1), np.float32)})
        assert rollout["rewards"].shape == (3, 1)
    assert "Collect stopped: its call ended" in caplog.text


def test_the_health_check_answers_while_every_call_is_taken() -> None:
    with serving("Pendulum-v1", 1) as address:
        raw = Raw(address)
        calls = [raw.future("Evaluate", evaluation(LONG), timeout=5)]
        time.sleep(0.2)  # the evaluation holds the environments
        calls += [raw.future("Spec", {}, timeout=5) for _ in range(4)]  # waiting for them, or refused as busy
        time.sleep(0.2)
        started = time.monotonic()
        assert raw.healthy(timeout=2)
        assert time.monotonic() - started < 1
        for call in calls:
            call.cancel()


def test_another_client_cannot_reset_a_live_session() -> None:
    """A Reset without the session's token is refused while the session is in use, so the owner's episodes go
    on; once the session has been idle for the lease (its client is gone), a new client takes it over."""
    actions = np.array([[1.0], [-1.0]], np.float32)
    with (
        serving("Pendulum-v1", 2, seed=2, limits=Limits(session_lease_seconds=1.0)) as address,
        RemoteBatchEnv([address], **FAST) as owner,
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=2) as local,
    ):
        intruder = Raw(address)
        np.testing.assert_array_equal(owner.reset(), local.reset())
        for _ in range(3):
            reply = intruder.call("Reset", {})
            assert reply["stale"] and "another client's session" in reply["error"]
            got, want = owner.step(actions), local.step(actions)
            assert not got.truncated.any()
            np.testing.assert_array_equal(got.observations, want.observations)
        time.sleep(1.2)  # the owner idles past the lease
        assert "session" in intruder.call("Reset", {})


def test_sigterm_ends_a_long_evaluation_within_the_grace_period() -> None:
    process = ServerProcess("--env", "Pendulum-v1", "--envs", 1, "--envs-per-process", 1, "--port", 0)
    try:
        raw = Raw(process.address)
        call = raw.future("Evaluate", evaluation(LONG), timeout=60)
        time.sleep(0.5)
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(5) == 0
        assert call.exception(5) is not None  # it was cut, not finished
    finally:
        process.stop()


def test_sigterm_ends_a_long_rollout_within_the_grace_period() -> None:
    """A Collect runs in the worker processes and is not interrupted between steps; stopping the server closes
    them, which ends it: well within Kubernetes' 30 s."""
    process = ServerProcess("--env", "Pendulum-v1", "--envs", 1, "--envs-per-process", 1, "--port", 0)
    try:
        raw = Raw(process.address)
        session = raw.call("Reset", {})["session"]
        noise = np.zeros((100_000, 1, 1), np.float32)  # tens of seconds of Pendulum on this machine
        call = raw.future("Collect", {**evaluation(1), "noise": noise, "session": session}, timeout=60)
        time.sleep(0.5)
        started = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(10) == 0
        assert time.monotonic() - started < 8
        assert call.exception(5) is not None
    finally:
        process.stop()


def test_rendered_frames_come_in_chunks_within_a_small_message_limit() -> None:
    """31 frames of 750 kB (23 MB) through messages of at most 2 MiB, exactly the frames rendered locally."""
    limit = 30
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    local_frames: list[np.ndarray] = []
    with LocalEpisodes("Pendulum-v1", limit, render=True) as local:
        want = local.run_episodes(policy, normalizer(), 1, 4, on_frame=local_frames.append)
    small = 2 << 20
    frames: list[np.ndarray] = []
    with (
        serving("Pendulum-v1", 1, max_episode_steps=limit, limits=Limits(max_message_bytes=small)) as address,
        RemoteBatchEnv([address], max_message_bytes=small, **FAST) as remote,
    ):
        assert remote.run_episodes(policy, normalizer(), 1, 4, on_frame=frames.append) == want
    np.testing.assert_array_equal(np.stack(frames), np.stack(local_frames))


def test_rendering_more_than_the_server_may_hold_is_refused() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    with (
        serving("Pendulum-v1", 1, max_episode_steps=30, limits=Limits(max_render_bytes=10 << 20)) as address,
        RemoteBatchEnv([address], **FAST) as remote,
        pytest.raises(EnvServerError, match=r"INVALID_ARGUMENT: Render: render: .* max_render_bytes 10485760"),
    ):
        remote.run_episodes(policy, normalizer(), 1, 0, on_frame=lambda frame: None)
