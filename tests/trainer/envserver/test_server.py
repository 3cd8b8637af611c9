"""The env server (envserver/server.py): deadlines that free the environments, a health check that always
answers, sessions other clients cannot take, SIGTERM within the grace period, frames in chunks."""

from __future__ import annotations

import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes
from agents_operator.trainer.envserver import server
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerUnavailable
from agents_operator.trainer.envserver.requests import Limits
from tests.trainer.batch_envs import wait_until_gone
from tests.trainer.cli import run
from tests.trainer.envserver.servers import FAST, LONG, Raw, ServerProcess, evaluation, normalizer, serving
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(60)


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
    steps = 2_000_000  # Pendulum acting in the worker: about 50 us a step, nearly two minutes
    with serving("Pendulum-v1", 1, limits=Limits(max_rollout_steps=steps)) as address:
        raw = Raw(address)
        session = raw.call("Reset", {})["session"]
        collect = {**evaluation(1), "session": session, "noise": np.zeros((steps, 1, 1), np.float32)}
        with pytest.raises(grpc.RpcError) as expired:
            raw.call("Collect", collect, timeout=1.0)
        assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # Not after the rollout (its workers were killed): a Reset that waited for it would pass its deadline,
        # which leaves room for a slow start of the fresh workers on a loaded machine.
        session = raw.call("Reset", {"session": session}, timeout=30)["session"]
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


# --- the server's process: SIGTERM, its command line ---------------------------------------------------------


def test_sigterm_closes_the_environments_and_a_gone_server_is_named() -> None:
    process = ServerProcess("--env", "Pendulum-v1", "--envs", 2, "--envs-per-process", 1, "--port", 0)
    try:
        workers = process.workers()
        assert len(workers) == 2
        with RemoteBatchEnv([process.address], timeout=5.0, max_failures=3) as env:
            env.reset()
            process.process.send_signal(signal.SIGTERM)
            assert process.process.wait(10) == 0
            assert not wait_until_gone(workers)
            started = time.monotonic()
            with pytest.raises(EnvServerUnavailable, match=f"env server {process.address} failed 3 times in a row"):
                env.step(np.zeros((2, 1)))
            assert time.monotonic() - started < 10
    finally:
        process.stop()


def test_command_line_mistakes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("env-server", "--env", "NoSuchEnvironment-v0", "--port", 0) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "agents-operator env-server: error: env_id 'NoSuchEnvironment-v0'" in error
    assert run("env-server", "--env", "Pendulum-v1", "--envs", 0) == 2
    assert "--envs must be at least 1" in capsys.readouterr().err
    with serving("Pendulum-v1", 1) as address:
        assert run("env-server", "--env", "Pendulum-v1", "--port", address.rsplit(":", 1)[1]) == 2
    assert "cannot listen on port" in capsys.readouterr().err


def test_serve_stops_on_sigterm_and_gives_the_signal_handlers_back(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(server.StartError):
        server.serve("CartPole-v1", 1, port=0)  # a discrete action space
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

    def terminate_once_serving() -> None:
        deadline = time.monotonic() + 30
        while "serving" not in capsys.readouterr().out and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # to the process, as a kubelet sends it: the main thread handles it

    with ThreadPoolExecutor(1) as pool:
        pool.submit(terminate_once_serving)
        assert server.serve("Pendulum-v1", 1, port=0) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
