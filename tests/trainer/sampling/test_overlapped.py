"""Overlapped sampling (sampling/overlapped.py): the next rollout runs in a thread while the learner updates,
acted by the policy one update behind and the statistics of its start; its batch is the behaviour's."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.types import EnvProcessError
from agents_operator.trainer.ppo.normalize import Moments
from agents_operator.trainer.sampling.batch import revalued, to_batch
from agents_operator.trainer.sampling.overlapped import OverlappedSampler, overlapped_batch
from agents_operator.trainer.sampling.samplers import Sampler
from agents_operator.trainer.sampling.training_env import TrainingEnv
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(60)


class Recording:
    """A sampler that records what each rollout acted with and in which thread, and can be held back; the
    policy "broken" raises as a dead environment process does."""

    def __init__(self, env: TrainingEnv):
        self.env = env
        self.rng = np.random.default_rng(0)
        self.acted: list[tuple[object, float, bool]] = []  # (policy, statistics count, in the caller's thread)
        self.release = threading.Event()
        self.release.set()

    def noise(self, policy: object) -> np.ndarray:
        return self.rng.standard_normal(3)

    def rollout_with(self, policy: object, normalizer, noise: np.ndarray) -> str:
        assert self.release.wait(10), "the rollout was never released"
        self.acted.append((policy, normalizer.shared.count, threading.current_thread() is threading.main_thread()))
        if policy == "broken":
            raise EnvProcessError("Pendulum-v1: worker process 7 died with signal SIGKILL")
        return f"rollout {len(self.acted)} by {policy}"


@pytest.fixture
def recording() -> Recording:
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=1, max_episode_steps=20) as batch_env:
        yield Recording(TrainingEnv(batch_env, ROLLOUT_CONFIG))


def test_each_rollout_is_acted_by_the_policy_one_update_behind_in_another_thread(recording: Recording) -> None:
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    taken = []
    for policy in ("theta0", "theta1", "theta2", "theta3"):
        rollout, behaviour = sampler.take(policy)
        taken.append((rollout, behaviour.policy))
    # The first rollout has nothing to overlap: collected with theta0, as is the one during theta1's update.
    assert taken == [
        ("rollout 1 by theta0", "theta0"),
        ("rollout 2 by theta0", "theta0"),
        ("rollout 3 by theta1", "theta1"),
        ("rollout 4 by theta2", "theta2"),
    ]
    sampler.discard()
    assert [in_caller for _, _, in_caller in recording.acted] == [False] * 5


def test_the_next_rollout_runs_while_the_caller_goes_on(recording: Recording) -> None:
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    sampler.take("theta0")
    recording.release.clear()  # the rollout in flight waits for the "update" below
    rollout, _ = sampler.take("theta1")  # returns at once: it does not wait for the one it starts
    assert rollout == "rollout 2 by theta0"
    recording.release.set()  # the update is done
    assert sampler.take("theta2")[0] == "rollout 3 by theta1"
    sampler.discard()


def test_a_rollout_acts_with_the_statistics_of_its_start_whatever_the_learner_does_meanwhile(
    recording: Recording,
) -> None:
    statistics = recording.env.observations
    statistics.shared = Moments(10.0, np.zeros(3), np.full(3, 10.0))
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    sampler.take("theta0")
    recording.release.clear()
    _, behaviour = sampler.take("theta1")  # rollout 3 starts with 10 samples counted
    statistics.shared = Moments(99.0, np.zeros(3), np.full(3, 99.0))  # the iteration's end, during the update
    recording.release.set()
    _, behaviour = sampler.take("theta2")
    assert behaviour.normalizer.shared.count == 10.0
    assert [count for _, count, _ in recording.acted] == [10.0, 10.0, 10.0, 99.0]
    sampler.discard()


def test_settle_frees_the_environments_and_keeps_the_rollout_discard_drops_it(recording: Recording) -> None:
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    sampler.take("theta0")
    sampler.settle()  # an evaluation may play now: the rollout of theta0 is kept, nothing else runs
    assert len(recording.acted) == 2
    assert sampler.take("theta1")[0] == "rollout 2 by theta0"
    sampler.discard()  # e.g. a lost ps: the rollout of theta1 is dropped...
    assert sampler.take("theta5")[0] == "rollout 4 by theta5"  # ...and the next one acts with the live policy
    sampler.discard()


def test_what_the_rollout_raised_is_raised_to_the_caller(recording: Recording) -> None:
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    sampler.take("theta0")
    sampler.take("broken")  # its rollout raises in the thread...
    with pytest.raises(EnvProcessError, match="SIGKILL"):
        sampler.take("theta2")  # ...and here, where it was to be taken


def real_rollouts(config=ROLLOUT_CONFIG):
    """Two rollouts of one real batch: by the first policy twice, then overlapped, taken with the first policy,
    then the second (which the second rollout runs during the "update" to)."""
    second = random_policy(config, 3, 1, seed=2)
    policies = random_policy(config, 3, 1, seed=1), dataclasses.replace(second, log_std=np.full(1, -1.0, np.float32))
    moments = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
    results = []
    for overlapped in (False, True):
        with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=11, max_episode_steps=20) as batch_env:
            env = TrainingEnv(batch_env, config)
            env.observations.shared = moments
            sampler = Sampler(env, config, np.random.default_rng(0))
            if not overlapped:
                first = policies[0]
                results.append([sampler.rollout_with(first, env.observations, sampler.noise(first)) for _ in policies])
                continue
            overlapping = OverlappedSampler(sampler, config)
            results.append([overlapping.take(p) for p in policies])
            overlapping.discard()
    return policies, results


BEHAVIOUR_VALUES = ROLLOUT_CONFIG.model_copy(update={"overlap_values": "behaviour"})


def test_an_overlapped_batch_is_the_behaviours_batch() -> None:
    """The rollouts are those of the same policies in order, bit for bit; the batch holds the behaviour's
    log-probabilities, log-std and the observations as it normalised them, whatever the statistics now."""
    (first, second), (serial, overlapped) = real_rollouts()
    for want, (got, behaviour) in zip(serial, overlapped, strict=True):
        assert behaviour.policy is first  # theta0 acts the first two rollouts
        for field in dataclasses.fields(want):
            if field.name == "simulation_seconds":  # timings
                continue
            np.testing.assert_array_equal(getattr(got, field.name), getattr(want, field.name), err_msg=field.name)
    rollout, behaviour = overlapped[1]
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=11, max_episode_steps=20) as batch_env:
        env = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        env.observations.shared = Moments(500.0, np.full(3, 100.0), np.full(3, 900.0))  # moved on since
        batch, _, _ = overlapped_batch(rollout, behaviour, env, second, BEHAVIOUR_VALUES)
        as_acted = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        as_acted.observations.shared = behaviour.normalizer.shared
        want, _, _ = to_batch(rollout, as_acted, first, ROLLOUT_CONFIG)
    for name, value in vars(want).items():
        np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
    np.testing.assert_array_equal(batch.log_std, first.log_std)
    np.testing.assert_array_equal(batch.values, rollout.values.reshape(-1))
    # PPO's clip is taken around the policy the update starts from (`ppo.losses.behaviour_weights`).
    np.testing.assert_array_equal(batch.proximal_log_probs, second.log_prob(batch.observations, batch.actions))
    assert not np.allclose(batch.proximal_log_probs, batch.log_probs)
    np.testing.assert_array_equal(env.observations.pending.sum, as_acted.observations.pending.sum)


def test_recomputed_values_are_the_current_value_nets_on_what_the_behaviour_saw() -> None:
    (_, second), (_, overlapped) = real_rollouts()
    rollout, behaviour = overlapped[1]
    again = revalued(rollout, second)
    acting = behaviour.normalizer.normalize(rollout.observations)
    np.testing.assert_array_equal(rollout.acting, acting)  # statistics fixed per rollout
    np.testing.assert_array_equal(again.values, second.value_of(acting[:-1]).astype(np.float32))
    np.testing.assert_array_equal(again.last_values, second.value_of(acting[-1]).astype(np.float32))
    assert not np.array_equal(again.values, rollout.values)
    np.testing.assert_array_equal(again.final_values, rollout.final_values)  # a rollout holds no final observations
    assert rollout.truncated.any() and (again.final_values[rollout.truncated] != 0).all()
    assert ROLLOUT_CONFIG.overlap_values == "recomputed"  # the default
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=11, max_episode_steps=20) as batch_env:
        batch, _, _ = overlapped_batch(
            rollout, behaviour, TrainingEnv(batch_env, ROLLOUT_CONFIG), second, ROLLOUT_CONFIG
        )
    np.testing.assert_array_equal(batch.values, again.values.reshape(-1))


def test_no_rollout_starts_after_the_last_update(recording: Recording) -> None:
    sampler = OverlappedSampler(recording, ROLLOUT_CONFIG)
    sampler.take("theta0")
    assert sampler.take("theta1", start_next=False)[0] == "rollout 2 by theta0"
    sampler.settle()
    assert len(recording.acted) == 2  # nothing was in flight


def test_the_batch_is_computed_with_numpys_blas_on_one_thread(recording: Recording, monkeypatch) -> None:
    from threadpoolctl import threadpool_info

    from agents_operator.trainer.sampling import overlapped

    def blas_threads() -> list[int]:
        return [library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas"]

    seen = []
    monkeypatch.setattr(overlapped, "overlapped_batch", lambda *arguments: seen.append(blas_threads()))
    before = blas_threads()
    OverlappedSampler(recording, ROLLOUT_CONFIG).batch("rollout", "behaviour", "policy")
    assert seen == [[1] * len(before)] and before and blas_threads() == before
