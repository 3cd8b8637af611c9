"""The trainer's samplers (sampling/samplers.py), one per placement of the environments: the same batches
wherever the policy acts, and PPO trained on remote environments in both modes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.envserver.client import RemoteBatchEnv
from agents_operator.trainer.ppo.normalize import Moments
from agents_operator.trainer.sampling.batch import to_batch
from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler, StepSampler, for_placement
from agents_operator.trainer.sampling.training_env import TrainingEnv
from tests.trainer.envserver.servers import FAST, serving
from tests.trainer.policies import ROLLOUT_CONFIG, random_policy

pytestmark = pytest.mark.timeout(60)


MID_RUN = Moments(50.0, np.array([10.0, -5.0, 20.0]), np.array([60.0, 40.0, 300.0]))
PER_STEP = ROLLOUT_CONFIG.model_copy(update={"observation_statistics": "step"})


def sample(env: TrainingEnv, sampler_type: type, rollouts: int = 2) -> tuple[list, np.random.Generator]:
    """Rollouts of a random policy, with normaliser statistics as a trainer would have them mid-run."""
    env.observations.shared = MID_RUN
    env.rewards.statistics.shared = Moments(50.0, np.array(-100.0), np.array(900.0))
    rng = np.random.default_rng(0)
    sampler = sampler_type(env, ROLLOUT_CONFIG, rng)
    policy = random_policy(ROLLOUT_CONFIG, 3, 1)
    return [sampler.collect(policy) for _ in range(rollouts)], rng


def test_rollout_mode_builds_the_batch_the_local_sampler_builds() -> None:
    from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler

    limit = {"max_episode_steps": 20}
    with BatchEnv("Pendulum-v1", 3, envs_per_process=3, seed=11, **limit) as batch_env:
        local = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        want, want_rng = sample(local, Sampler)
    with serving("Pendulum-v1", 3, seed=11, **limit) as address, RemoteBatchEnv([address], **FAST) as batch_env:
        remote = TrainingEnv(batch_env, ROLLOUT_CONFIG)
        got, got_rng = sample(remote, RolloutSampler)
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(got, want, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
        assert (returns, lengths) == (want_returns, want_lengths)
    assert [len(returns) for _, returns, _ in got] == [3, 6]  # episodes of 20 steps end at steps 20, 40 and 60
    np.testing.assert_array_equal(remote.observations.pending.sum, local.observations.pending.sum)
    np.testing.assert_array_equal(remote.rewards.statistics.pending.sumsq, local.rewards.statistics.pending.sumsq)
    np.testing.assert_array_equal(remote.rewards.returns, local.rewards.returns)
    assert got_rng.bit_generator.state == want_rng.bit_generator.state


def test_where_the_policy_acts_changes_nothing_and_grouping_only_rounding() -> None:
    """The worker processes acting for their own environments (`Sampler`) or this process acting for each
    process in turn (`StepSampler`): the same rollouts, bit for bit. One process of 3 environments or two
    (2 + 1): the same rollouts but for how the policy's matrix products round on 3 rows or on 2 and 1."""
    from agents_operator.trainer.sampling.samplers import Sampler, StepSampler

    samples = {}
    for envs_per_process, sampler in ((3, Sampler), (2, Sampler), (2, StepSampler)):
        with BatchEnv("Pendulum-v1", 3, envs_per_process=envs_per_process, seed=11, max_episode_steps=20) as env:
            samples[envs_per_process, sampler] = sample(TrainingEnv(env, ROLLOUT_CONFIG), sampler)
    (grouped, grouped_rng), (here, here_rng) = samples[2, Sampler], samples[2, StepSampler]
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(grouped, here, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
        assert (returns, lengths) == (want_returns, want_lengths)
    assert grouped_rng.bit_generator.state == here_rng.bit_generator.state
    whole, whole_rng = samples[3, Sampler]
    for (batch, returns, lengths), (want_batch, want_returns, want_lengths) in zip(grouped, whole, strict=True):
        for name, value in vars(want_batch).items():
            np.testing.assert_allclose(getattr(batch, name), value, rtol=1e-4, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(returns, want_returns, rtol=1e-4)
        assert lengths == want_lengths == [20] * len(lengths)
    assert grouped_rng.bit_generator.state == whole_rng.bit_generator.state


def test_per_step_statistics_are_each_processs_own_and_the_same_wherever_the_policy_acts() -> None:
    """observation_statistics "step": each process normalises with the statistics the rollout started from
    (here mid-run, plus the environments' first observations, still pending) and every observation of its own
    environments since, computed by hand below; the same rollouts whether the worker processes act or this
    one, and the batch holds the observations as acted on."""
    rollouts = {}
    for sampler_type in (Sampler, StepSampler):
        with BatchEnv("Pendulum-v1", 3, envs_per_process=2, seed=11, max_episode_steps=20) as batch_env:
            env = TrainingEnv(batch_env, PER_STEP)
            env.observations.shared = MID_RUN
            sampler = sampler_type(env, PER_STEP, np.random.default_rng(0))
            policy = random_policy(PER_STEP, 3, 1)
            rollouts[sampler_type] = rollout = sampler.rollout(policy)
            batch, _, _ = to_batch(rollout, env, policy, PER_STEP)
    for field in dataclasses.fields(Rollout):
        if field.name != "simulation_seconds":
            got, want = getattr(rollouts[Sampler], field.name), getattr(rollouts[StepSampler], field.name)
            np.testing.assert_array_equal(got, want, err_msg=field.name)
    observations, acting = rollout.observations, rollout.acting
    np.testing.assert_array_equal(batch.observations, acting[:-1].reshape(-1, 3))
    for rows in (slice(0, 2), slice(2, 3)):  # the two processes' environments
        moments = MID_RUN + Moments.of(observations[0])
        for t in range(PER_STEP.rollout_steps + 1):
            mean, std = moments.mean.astype(np.float32), np.sqrt(moments.var + 1e-8).astype(np.float32)
            np.testing.assert_allclose(acting[t, rows], (observations[t, rows] - mean) / std, rtol=1e-6, atol=1e-6)
            if t < PER_STEP.rollout_steps:
                moments = moments + Moments.of(observations[t + 1, rows])
    fixed = (observations - MID_RUN.mean.astype(np.float32)) / np.sqrt(MID_RUN.var + 1e-8).astype(np.float32)
    assert not np.allclose(acting[1:], fixed[1:], atol=1e-3)  # not the statistics the rollout started from


# --- training ----------------------------------------------------------------------------------------


def test_ppo_trains_on_remote_environments_in_both_modes() -> None:
    from agents_operator.trainer.learner import Learner
    from agents_operator.trainer.sampling.samplers import RolloutSampler, StepSampler

    config = TrainerConfig(
        env_id="Pendulum-v1", envs_per_worker=4, rollout_steps=256, minibatches=4, epochs=2, total_steps=3072
    )
    with (
        serving("Pendulum-v1", 2, seed=0) as first,
        serving("Pendulum-v1", 2, seed=2) as second,
        RemoteBatchEnv([first, second], **FAST) as batch_env,
    ):
        learner = Learner(config, 3, 1)
        try:
            state = learner.initialize()
            env = TrainingEnv(batch_env, config)
            rng = np.random.default_rng(0)
            returns = []
            per_step, whole = StepSampler(env, config, rng), RolloutSampler(env, config, rng)
            for sampler in (per_step, per_step, whole):
                batch, episode_returns, _ = sampler.collect(state.policy)
                losses = learner.update(batch, rng)
                state, _ = learner.finish_iteration(
                    batch, len(batch), env.observations.take_pending(), env.rewards.statistics.take_pending()
                )
                env.observations.shared = state.observation_moments
                env.rewards.statistics.shared = state.return_moments
                returns += episode_returns
                assert np.isfinite(losses["policy_loss"]) and np.isfinite(losses["value_loss"])
        finally:
            learner.close()
    assert (state.env_steps, state.iterations) == (3072, 3)
    assert len(returns) >= 4 and all(-2000 < r < 0 for r in returns)


class Envs:
    """A batch of three environments that only resets (what a sampler does when it is made)."""

    observation_shape, action_shape, num_envs = (3,), (1,), 3

    def reset(self) -> np.ndarray:
        return np.ones((3, 3), np.float32)


@pytest.mark.parametrize(
    ("servers", "sampler"),
    [
        (None, Sampler),
        (EnvServers(("envs:50051",), "step"), StepSampler),
        (EnvServers(("envs:50051",), "rollout"), RolloutSampler),
    ],
    ids=["colocated", "step", "rollout"],
)
def test_each_placement_gets_its_sampler(servers, sampler):
    env = TrainingEnv(Envs(), ROLLOUT_CONFIG)  # type: ignore[arg-type]
    chosen = for_placement(env, ROLLOUT_CONFIG, np.random.default_rng(0), servers)
    assert type(chosen) is sampler and chosen.env is env
    assert env.observations.pending.count == 3  # made once: its first observations counted once
