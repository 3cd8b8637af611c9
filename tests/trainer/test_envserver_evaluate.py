"""Evaluate: an env server plays evaluation episodes exactly as `episodes.run_episodes` does here."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes, run_episodes
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.envserver import server
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError
from agents_operator.trainer.ppo.normalize import Moments, Normalizer

from .envserver_envs import RAISING
from .test_envserver import FAST, ROLLOUT_CONFIG, random_actions, random_policy, serving

pytestmark = pytest.mark.timeout(120)

LIMIT = 30  # steps per episode: short evaluations


def normalizer() -> Normalizer:
    """Observation statistics as a trainer has them mid-run, so that normalising changes the actions."""
    observations = Normalizer((3,), ROLLOUT_CONFIG.clip_observations)
    observations.shared = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
    return observations


def test_evaluate_returns_what_local_episodes_return_bit_for_bit() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    env = make_env("Pendulum-v1", LIMIT)
    try:
        want = [run_episodes(env, policy, normalizer(), 3, seed) for seed in (7, 7, 100)]
    finally:
        env.close()
    with serving("Pendulum-v1", 2, max_episode_steps=LIMIT) as address, RemoteBatchEnv([address], **FAST) as remote:
        got = [remote.run_episodes(policy, normalizer(), 3, seed) for seed in (7, 7, 100)]
    assert got == want  # floats compared exactly
    assert got[0] == got[1] != got[2] and got[0][1] == [LIMIT] * 3
    assert len(set(got[0][0])) == 3  # seeds 7, 8 and 9: three different episodes


def test_evaluate_renders_the_frames_a_local_environment_renders() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    local_frames: list[np.ndarray] = []
    with LocalEpisodes("Pendulum-v1", LIMIT, render=True) as local:
        want = local.run_episodes(policy, normalizer(), 2, 3, on_frame=local_frames.append)
    frames: list[np.ndarray] = []
    with serving("Pendulum-v1", 1, max_episode_steps=LIMIT) as address, RemoteBatchEnv([address], **FAST) as remote:
        assert remote.render_fps == local.render_fps == 30
        got = remote.run_episodes(policy, normalizer(), 2, 3, on_frame=frames.append)
    assert got == want
    assert len(frames) == len(local_frames) == 2 * (LIMIT + 1)  # the first observation's frame, then each step's
    assert all(frame.shape == (500, 500, 3) and frame.dtype == np.uint8 for frame in frames)
    np.testing.assert_array_equal(np.stack(frames), np.stack(local_frames))


def test_evaluating_leaves_the_batch_and_its_session_alone() -> None:
    """Steps interleaved with evaluations are exactly the steps of a batch that is never evaluated."""
    policy, actions = random_policy(ROLLOUT_CONFIG, 3, 1), random_actions(12, 2)
    with (
        serving("Pendulum-v1", 2, seed=4, max_episode_steps=5) as address,
        RemoteBatchEnv([address], **FAST) as remote,
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=4, max_episode_steps=5) as local,
    ):
        np.testing.assert_array_equal(remote.reset(), local.reset())
        for t, action in enumerate(actions):
            if t % 4 == 1:
                remote.run_episodes(policy, normalizer(), 1, t)
            got, want = remote.step(action), local.step(action)
            for name, value in vars(want).items():
                np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)


def test_evaluate_waits_for_a_restarted_server_without_resetting_it(caplog: pytest.LogCaptureFixture) -> None:
    """A server that is down when an evaluation is sent: the evaluation is sent again once it is back,
    without a reset; the batch then finds its session stale and cuts its episodes, as after any restart."""
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    options = {"seed": 3, "envs_per_process": 2, "max_episode_steps": LIMIT}
    service = server.EnvService("Pendulum-v1", 2, **options)
    grpc_server, port = server.start(service, 0)
    restarted: list[tuple[grpc.Server, server.EnvService]] = []

    def restart() -> None:
        service = server.EnvService("Pendulum-v1", 2, **options)
        restarted.append((server.start(service, port)[0], service))

    restarting = threading.Timer(0.5, restart)
    try:
        with RemoteBatchEnv([f"localhost:{port}"], **FAST) as remote:
            remote.reset()
            want = remote.run_episodes(policy, normalizer(), 2, 11)
            grpc_server.stop(0).wait()
            restarting.start()  # the server comes back while the client is already retrying
            assert remote.run_episodes(policy, normalizer(), 2, 11) == want
            assert "reconnecting" in caplog.text and "reset;" not in caplog.text
            cut = remote.step(np.zeros((2, 1)))
    finally:
        restarting.cancel()
        if restarting.is_alive():
            restarting.join()
        for stopped, closed in [(grpc_server, service), *restarted]:
            stopped.stop(0).wait()
            closed.close()
    assert cut.truncated.all() and not cut.rewards.any()


def test_an_error_in_the_evaluation_environment_surfaces_with_its_traceback() -> None:
    config = ROLLOUT_CONFIG
    policy = random_policy(config, 1, 1)
    with serving(RAISING, 1) as address, RemoteBatchEnv([address], **FAST) as remote:
        with pytest.raises(EnvServerError) as failure:
            remote.run_episodes(policy, Normalizer((1,), config.clip_observations), 1, 0)
        assert f"env server {address}" in str(failure.value)
        assert "ZeroDivisionError: the test environment fails on purpose" in str(failure.value)
        with pytest.raises(RuntimeError, match="unusable"):
            remote.run_episodes(policy, Normalizer((1,), config.clip_observations), 1, 0)
