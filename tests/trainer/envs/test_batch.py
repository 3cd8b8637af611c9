"""`BatchEnv` (envs/batch.py), the parent's side of the worker processes: batch shapes, seeding, autoreset,
groups stepped on their own, clipping, failures reported with the worker's traceback, clean shutdown."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from agents_operator.trainer.envs import rollout as rollout_module
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.make import make_env, usable_cpus
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.types import EnvProcessError
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from tests.trainer.batch_envs import ECHO, PID, RAISING, SLOW, STEP_SECONDS, alive, wait_until_gone, worker_pids

pytestmark = pytest.mark.timeout(60)


def test_pendulum_batch_shapes_and_dtypes() -> None:
    with BatchEnv("Pendulum-v1", num_envs=3, envs_per_process=2) as env:
        assert (env.num_envs, env.num_processes, env.observation_shape, env.action_shape) == (3, 2, (3,), (1,))
        np.testing.assert_array_equal(env.action_low, [-2.0])
        np.testing.assert_array_equal(env.action_high, [2.0])
        observations = env.reset()
        assert observations.shape == (3, 3) and observations.dtype == np.float32
        result = env.step(np.zeros((3, 1)))
    assert result.observations.shape == result.final_observations.shape == (3, 3)
    assert result.observations.dtype == result.final_observations.dtype == np.float32
    assert result.rewards.shape == (3,) and result.rewards.dtype == np.float32
    assert result.terminated.dtype == result.truncated.dtype == np.bool_
    assert result.episode_returns == [] and result.episode_lengths == []


def test_bullet_batch_shapes_and_dtypes() -> None:
    with BatchEnv("InvertedPendulumBulletEnv-v0", num_envs=2) as env:
        assert env.num_processes == min(2, usable_cpus())  # by default, one process per CPU
        assert (env.observation_shape, env.action_shape) == ((5,), (1,))
        assert env.reset().shape == (2, 5)
        result = env.step(np.zeros((2, 1)))
    assert result.observations.shape == (2, 5) and result.observations.dtype == np.float32
    assert result.rewards.shape == (2,)


def test_same_seed_same_rollout() -> None:
    actions = np.random.default_rng(0).uniform(-2, 2, (30, 4, 1)).astype(np.float32)

    def rollout(seed: int) -> np.ndarray:
        with BatchEnv("Pendulum-v1", num_envs=4, envs_per_process=2, seed=seed) as env:
            return np.stack([env.reset()] + [env.step(action).observations for action in actions])

    first = rollout(7)
    np.testing.assert_array_equal(first, rollout(7))
    assert len({tuple(observation) for observation in first[0]}) == 4  # environment j is seeded with seed + j


def test_autoreset_matches_a_plain_gymnasium_loop() -> None:
    num_envs, seed, limit, steps = 3, 5, 20, 45
    actions = np.random.default_rng(1).uniform(-2, 2, (steps, num_envs, 1)).astype(np.float32)
    with BatchEnv("Pendulum-v1", num_envs, envs_per_process=2, seed=seed, max_episode_steps=limit) as env:
        first = env.reset()
        batch = [env.step(action) for action in actions]

    plain_returns = []
    for j in range(num_envs):
        plain = make_env("Pendulum-v1", max_episode_steps=limit)
        observation, _ = plain.reset(seed=seed + j)
        np.testing.assert_array_equal(first[j], observation)
        episode_return, returns = 0.0, []
        for t, result in enumerate(batch):
            observation, reward, terminated, truncated, _ = plain.step(actions[t, j])
            episode_return += float(reward)
            np.testing.assert_array_equal(result.final_observations[j], observation)
            assert result.rewards[j] == np.float32(reward)
            assert (result.terminated[j], result.truncated[j]) == (terminated, truncated)
            if terminated or truncated:
                returns.append(episode_return)
                episode_return = 0.0
                observation, _ = plain.reset()
            np.testing.assert_array_equal(result.observations[j], observation)
        plain_returns.append(returns)

    # Every environment hits the time limit in the same steps, so each of those reports all of them.
    ended = [result for result in batch if result.episode_returns]
    assert [result.episode_returns for result in ended] == [list(step) for step in zip(*plain_returns, strict=True)]
    assert [result.episode_lengths for result in ended] == [[limit] * num_envs] * (steps // limit)
    assert all(result.truncated.all() for result in ended)


def test_groups_step_on_their_own_and_step_is_all_of_them() -> None:
    with BatchEnv(ECHO, num_envs=5, envs_per_process=2) as env:
        assert env.groups == [range(0, 2), range(2, 3), range(3, 5)]
        pids = env.reset()[:, PID]
        env.send_step(2, [[0.1, 0.2], [0.3, 0.4]])
        for value in (0.1, 0.2, 0.3):  # group 0 goes three steps while group 2's is in flight
            env.send_step(0, np.full((2, 2), value))
            result = env.receive_step(0)
            np.testing.assert_allclose(result.observations[:, :2], value)
            np.testing.assert_array_equal(result.observations[:, PID], pids[:2])
        result = env.receive_step(2)
        np.testing.assert_allclose(result.observations[:, :2], [[0.1, 0.2], [0.3, 0.4]])
        np.testing.assert_array_equal(result.observations[:, PID], pids[3:])
        assert result.rewards.shape == result.terminated.shape == (2,) and result.episode_returns == []
        whole = env.step(np.full((5, 2), 0.4))
        np.testing.assert_allclose(whole.observations[:, :2], 0.4)
        np.testing.assert_array_equal(whole.observations[:, PID], pids)


def test_a_group_misused_is_refused_and_the_batch_stays_usable() -> None:
    with BatchEnv(ECHO, num_envs=2, envs_per_process=1) as env:
        with pytest.raises(RuntimeError, match="reset"):
            env.send_step(0, np.zeros((1, 2)))
        env.reset()
        with pytest.raises(RuntimeError, match="group 1 is not stepping; send_step it first"):
            env.receive_step(1)
        with pytest.raises(ValueError, match=r"actions must have shape \(1, 2\), got \(2, 2\)"):
            env.send_step(1, np.zeros((2, 2)))
        env.send_step(1, np.zeros((1, 2)))
        with pytest.raises(RuntimeError, match="group 1 is already stepping; receive_step it first"):
            env.send_step(1, np.zeros((1, 2)))
        assert env.reset().shape == (2, 5)  # takes the step in flight first
        np.testing.assert_allclose(env.step(np.full((2, 2), 0.25)).observations[:, :2], 0.25)


def test_actions_are_clipped_and_workers_are_lean() -> None:
    with BatchEnv(ECHO, num_envs=2, envs_per_process=1) as env:
        assert env.reset().dtype == np.float32
        np.testing.assert_array_equal(env.action_low, [-0.5, -0.5])
        observations = env.step(np.array([[2.0, -3.0], [0.25, 0.0]])).observations
    np.testing.assert_array_equal(observations[:, :2], [[0.5, -0.5], [0.25, 0.0]])
    tensorflow_loaded, single_threaded = observations[:, 2], observations[:, 3]
    assert not tensorflow_loaded.any() and single_threaded.all()


def test_discrete_action_spaces_are_refused() -> None:
    with pytest.raises(ValueError, match=r"CartPole-v1.*Box action spaces only"):
        BatchEnv("CartPole-v1", num_envs=1)


def test_an_unknown_env_id_surfaces_the_workers_traceback() -> None:
    with pytest.raises(EnvProcessError, match=r"(?s)environment 0 raised.*NameNotFound"):
        BatchEnv("NoSuchEnvironment-v0", num_envs=1)


def test_an_exception_in_step_surfaces_its_traceback() -> None:
    with BatchEnv(RAISING, num_envs=3, envs_per_process=3) as env:
        env.reset()
        env.step(np.zeros((3, 2)))
        env.step(np.zeros((3, 2)))
        with pytest.raises(EnvProcessError) as failure:
            env.step(np.zeros((3, 2)))
        message = str(failure.value)
        assert "environment 0 raised" in message and "BatchEnvTestRaising-v0" in message
        assert "in step" in message and "ZeroDivisionError: the test environment fails on purpose" in message
        with pytest.raises(RuntimeError, match="unusable"):
            env.step(np.zeros((3, 2)))


def test_an_exception_during_a_rollout_surfaces_its_traceback() -> None:
    """`collect` runs whole rollouts in the workers: a failing environment is reported as by `step`."""
    policy = NumpyPolicy(
        [(np.zeros((5, 2), np.float32), np.zeros(2, np.float32))],
        np.zeros(2, np.float32),
        [(np.zeros((5, 1), np.float32), np.zeros(1, np.float32))],
        "tanh",
    )
    observations = Normalizer((5,), clip=10.0)
    with BatchEnv(RAISING, num_envs=3, envs_per_process=2) as env:
        with pytest.raises(RuntimeError, match="reset"):
            env.collect(policy, observations, Noise.per_step(np.zeros((2, 3, 2), np.float32)))
        env.reset()
        with pytest.raises(ValueError, match=r"noise draws must have shape \(draws, 3, 2\), got \(2, 2, 2\)"):
            env.collect(policy, observations, Noise.per_step(np.zeros((2, 2, 2), np.float32)))
        rollout = env.collect(policy, observations, Noise.per_step(np.zeros((2, 3, 2), np.float32)))
        assert rollout.observations.shape == (3, 3, 5) and rollout.actions.shape == (2, 3, 2)
        with pytest.raises(EnvProcessError) as failure:
            env.collect(policy, observations, Noise.per_step(np.zeros((2, 3, 2), np.float32)))
        message = str(failure.value)
        assert "environment 0 raised" in message and "ZeroDivisionError: the test environment fails" in message
        with pytest.raises(RuntimeError, match="unusable"):
            env.collect(policy, observations, Noise.per_step(np.zeros((2, 3, 2), np.float32)))


def test_a_rollout_says_how_long_each_process_simulated() -> None:
    """Each worker process times its environments' steps during a rollout: at least the steps' own time, never
    more than the rollout's wall time; `simulation_share` relates them (the tiny policy costs next to nothing)."""
    policy = NumpyPolicy(
        [(np.zeros((5, 2), np.float32), np.zeros(2, np.float32))],
        np.zeros(2, np.float32),
        [(np.zeros((5, 1), np.float32), np.zeros(1, np.float32))],
        "tanh",
    )
    steps = 25
    with BatchEnv(SLOW, num_envs=3, envs_per_process=2) as env:
        env.reset()
        begin = time.perf_counter()
        rollout = env.collect(policy, Normalizer((5,), clip=10.0), Noise.per_step(np.zeros((steps, 3, 2), np.float32)))
        wall = time.perf_counter() - begin
    first, second = rollout.simulation_seconds.tolist()  # 2 environments, then 1
    assert first >= 2 * steps * STEP_SECONDS and second >= steps * STEP_SECONDS
    assert max(first, second) <= wall
    assert rollout_module.simulation_share(rollout.simulation_seconds, wall) == pytest.approx(
        (first + second) / 2 / wall
    )
    assert rollout_module.simulation_share(np.zeros(0), wall) is None


def test_a_killed_worker_is_reported() -> None:
    with BatchEnv(ECHO, num_envs=2, envs_per_process=1) as env:
        victim, survivor = sorted(worker_pids(env))
        os.kill(victim, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(EnvProcessError, match="died with signal SIGKILL"):
            env.step(np.zeros((2, 2)))
        assert time.monotonic() - started < 10
    assert not wait_until_gone({survivor})


def test_close_is_idempotent_and_leaves_no_workers() -> None:
    env = BatchEnv(ECHO, num_envs=2, envs_per_process=1)
    pids = worker_pids(env)
    assert len(pids) == 2
    env.close()
    env.close()
    assert not {pid for pid in pids if alive(pid)}
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_close_kills_a_worker_that_does_not_answer() -> None:
    env = BatchEnv(ECHO, num_envs=2, envs_per_process=1)
    pids = worker_pids(env)
    os.kill(min(pids), signal.SIGSTOP)
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < 10
    assert not {pid for pid in pids if alive(pid)}
