"""The env servers' client (envserver/client.py): `RemoteBatchEnv` steps, evaluates and collects exactly as a
local BatchEnv does, reports an environment's error in one line, and resends what a restarted server lost."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.episodes import LocalEpisodes, run_episodes
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envserver import protocol, server
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.envserver.connection import EnvServerError
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.training_env import TrainingEnv
from tests.trainer.envserver.servers import FAST, random_actions, serving
from tests.trainer.envserver_envs import RAISING
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(60)


def test_steps_match_a_local_batch_env_exactly() -> None:
    """Two servers (seeds 5 and 5 + 2) make one batch that steps exactly like BatchEnv(seed=5)."""
    actions = random_actions(45, 3)
    limit = {"max_episode_steps": 20}
    with (
        serving("Pendulum-v1", 2, seed=5, **limit) as first,
        serving("Pendulum-v1", 1, seed=7, **limit) as second,
        RemoteBatchEnv([first, second], **FAST) as remote,
        BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=5, **limit) as local,
    ):
        assert (remote.num_envs, remote.observation_shape, remote.action_shape) == (3, (3,), (1,))
        np.testing.assert_array_equal(remote.action_high, local.action_high)
        np.testing.assert_array_equal(remote.reset(), local.reset())
        ended = 0
        for action in actions:
            got, want = remote.step(action), local.step(action)
            for name, value in vars(want).items():
                np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
            ended += len(got.episode_returns)
        assert ended == 6  # every environment ended two episodes (automatic resets included)
        health = grpc.insecure_channel(first).unary_unary(f"/{protocol.HEALTH_SERVICE}/{protocol.HEALTH_METHOD}")
        assert health(b"", timeout=5) == protocol.HEALTH_SERVING


def test_servers_are_groups_stepped_on_their_own_like_local_processes() -> None:
    """Each server is a group (`send_step`, `receive_step`), like each process of a BatchEnv."""
    actions = random_actions(6, 3)
    with (
        serving("Pendulum-v1", 2, seed=5) as first,
        serving("Pendulum-v1", 1, seed=7) as second,
        RemoteBatchEnv([first, second], **FAST) as remote,
        BatchEnv("Pendulum-v1", 3, envs_per_process=2, seed=5) as local,
    ):
        assert remote.groups == local.groups == [range(0, 2), range(2, 3)]
        np.testing.assert_array_equal(remote.reset(), local.reset())
        for env in (remote, local):
            with pytest.raises(RuntimeError, match="group 0 is not stepping; send_step it first"):
                env.receive_step(0)
        got, want = [], []
        for env, results in ((remote, got), (local, want)):
            env.send_step(1, actions[0, 2:])
            for t in range(3):  # the first server goes three steps while the second is in flight
                env.send_step(0, actions[t, :2])
                results.append(env.receive_step(0))
            with pytest.raises(RuntimeError, match="group 1 is already stepping; receive_step it first"):
                env.send_step(1, actions[1, 2:])
            results.append(env.receive_step(1))
            results.append(env.step(actions[3]))
        for mine, theirs in zip(got, want, strict=True):
            for name, value in vars(theirs).items():
                np.testing.assert_array_equal(getattr(mine, name), value, err_msg=name)


def test_an_environment_error_is_one_line_to_the_client_and_its_traceback_in_the_server_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with serving(RAISING, 2) as address:
        with RemoteBatchEnv([address], **FAST) as env:
            env.reset()
            env.step(np.zeros((2, 1)))
            env.step(np.zeros((2, 1)))
            with pytest.raises(EnvServerError) as failure:
                env.step(np.zeros((2, 1)))
            message = str(failure.value)
            assert "\n" not in message and "Traceback" not in message, message
            assert f"env server {address} (environments 0-1): EnvProcessError: " in message
            assert "environment 0 raised" in message
            assert "ZeroDivisionError: the test environment fails on purpose" in message
            assert "(traceback in the env server's log)" in message
            assert "Step failed" in caplog.text and "in step" in caplog.text  # the server's log has it whole
            with pytest.raises(RuntimeError, match="unusable"):
                env.step(np.zeros((2, 1)))
        with RemoteBatchEnv([address], **FAST) as env:  # the server builds a fresh batch for the next client
            env.reset()
            np.testing.assert_array_equal(env.step(np.zeros((2, 1))).observations, [[1.0], [1.0]])


def test_rollout_mode_resends_a_rollout_to_a_restarted_server() -> None:
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    noise = np.random.default_rng(0).standard_normal((5, 3, 1), dtype=np.float32)
    service = server.EnvService("Pendulum-v1", 2, seed=3, envs_per_process=2)
    grpc_server, port = server.start(service, 0)
    try:
        with serving("Pendulum-v1", 1, seed=5) as other, RemoteBatchEnv([f"localhost:{port}", other], **FAST) as env:
            training = TrainingEnv(env, ROLLOUT_CONFIG)
            training.reset()
            assert not env.collect(policy, training.observations, Noise.per_step(noise)).restarted.any()
            grpc_server.stop(0).wait()
            service.close()
            service = server.EnvService("Pendulum-v1", 2, seed=3, envs_per_process=2)
            grpc_server, _ = server.start(service, port)
            rollout = env.collect(policy, training.observations, Noise.per_step(noise))
    finally:
        grpc_server.stop(0).wait()
        service.close()
    assert rollout.restarted.tolist() == [True, True, False] and rollout.rewards.shape == (5, 3)
    with BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3) as fresh:
        np.testing.assert_array_equal(rollout.observations[0, :2], fresh.reset())
    # Each server sampled with its own columns of the trainer's noise.
    log_std = policy.log_std
    np.testing.assert_allclose((rollout.actions - rollout.means) / np.exp(log_std), noise, atol=1e-5)
    expected = -0.5 * np.square(noise[..., 0]) - log_std[0] - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(rollout.log_probs, expected, atol=1e-5)


# --- Evaluate: an env server plays evaluation episodes exactly as `episodes.run_episodes` does here ----------


LIMIT = 30  # steps per episode: short evaluations


def normalizer() -> Normalizer:
    """Observation statistics as a trainer has them mid-run, so that normalising changes the actions."""
    observations = Normalizer((3,), ROLLOUT_CONFIG.clip_observations)
    observations.shared = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
    return observations


@pytest.mark.timeout(120)
def test_rollout_mode_with_held_exploration_weights_collects_what_a_local_batch_collects() -> None:
    """gSDE's weights held for 4 steps travel to each server as its rows (noise_steps, noise_hold): the same
    rollout as a BatchEnv grouped as the servers, bit for bit."""
    plain = random_policy(ROLLOUT_CONFIG, 3, 1)
    log_std = np.random.default_rng(1).normal(-1.0, 0.3, (16, 1)).astype(np.float32)
    policy = NumpyPolicy(plain.policy, log_std, plain.value, plain.activation)
    noise = Noise.draw(np.random.default_rng(2), 10, 3, log_std, hold=4)
    with (
        serving("Pendulum-v1", 2, seed=5) as first,
        serving("Pendulum-v1", 1, seed=7) as second,
        RemoteBatchEnv([first, second], **FAST) as remote,
        BatchEnv("Pendulum-v1", 3, envs_per_process=2, seed=5) as local,
    ):
        remote.reset(), local.reset()
        observations = Normalizer((3,), 10.0)
        got, want = remote.collect(policy, observations, noise), local.collect(policy, observations, noise)
    for name in ("observations", "actions", "log_probs", "means", "values", "rewards"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    np.testing.assert_allclose(want.log_probs, policy.log_prob(acted_on(want, observations), want.actions), atol=1e-4)


def acted_on(rollout, observations: Normalizer) -> np.ndarray:
    """What each step of `rollout` acted on: its observations before the step, normalised."""
    return observations.normalize(rollout.observations[:-1].reshape(-1, 3)).reshape(*rollout.actions.shape[:2], 3)


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


@pytest.mark.timeout(120)
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


@pytest.mark.timeout(120)
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


@pytest.mark.timeout(120)
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


@pytest.mark.timeout(120)
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
