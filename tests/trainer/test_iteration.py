"""One PPO iteration (trainer/iteration.py): a rollout of N x T transitions by the acting policy, its batch,
the update, and the end of the iteration that counts it and pushes the normalisers' sums; the same as those
steps taken by hand from the same state and random numbers."""

import dataclasses

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.iteration import iterate
from agents_operator.trainer.learner import Learner
from agents_operator.trainer.sampling.batch import revalued, to_batch
from agents_operator.trainer.sampling.samplers import Sampler
from agents_operator.trainer.sampling.training_env import TrainingEnv

pytestmark = pytest.mark.timeout(120)

CONFIG = TrainerConfig(
    env_id="Pendulum-v1",
    envs_per_worker=2,
    envs_per_process=2,
    rollout_steps=32,
    minibatches=2,
    epochs=2,
    max_episode_steps=20,
    policy_layers=[16],
    value_layers=[16],
)


def test_an_iteration_is_its_steps_taken_in_order():
    with (
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3, max_episode_steps=20) as one,
        BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3, max_episode_steps=20) as other,
    ):
        learner, by_hand = Learner(CONFIG, 3, 1), Learner(CONFIG, 3, 1)  # weights initialised from config.seed
        try:
            start = learner.initialize()
            np.testing.assert_array_equal(by_hand.initialize().policy.policy[0][0], start.policy.policy[0][0])
            env = TrainingEnv(one, CONFIG)
            sampler = Sampler(env, CONFIG, np.random.default_rng(5))
            done = iterate(start, sampler, learner, CONFIG, np.random.default_rng(9))

            # The same steps by hand from the same state: the same rollout, batch and update.
            by_hand_env = TrainingEnv(other, CONFIG)
            batch, returns, lengths = Sampler(by_hand_env, CONFIG, np.random.default_rng(5)).collect(start.policy)
            metrics = by_hand.update(batch, np.random.default_rng(9))
            pending = by_hand_env.observations.take_pending(), by_hand_env.rewards.statistics.take_pending()
            state, finished = by_hand.finish_iteration(batch, len(batch), *pending)
        finally:
            learner.close()
            by_hand.close()
    assert done.steps == len(batch) == 64
    assert (done.episode_returns, done.episode_lengths) == (returns, lengths) and lengths == [20, 20]
    assert (done.state.global_step, done.state.env_steps, done.state.iterations) == (1, 64, 1)
    assert (state.global_step, state.env_steps, state.iterations) == (1, 64, 1)
    assert set(done.metrics) == set(metrics) | set(finished)
    for name, value in {**metrics, **finished}.items():
        if not name.endswith("seconds"):  # timings: the only thing allowed to differ
            assert done.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert done.state.observation_moments.count == state.observation_moments.count == 2 + 64  # reset, then steps
    np.testing.assert_allclose(done.state.policy.policy[0][0], state.policy.policy[0][0], rtol=1e-5, atol=1e-6)
    assert env.observations.pending.count == 0  # pushed at the iteration's end
    assert done.sampling_seconds > 0 and done.update_seconds > 0


def _iterate_by_hand(learner, acting, start, config, revalue: bool):
    """An update on the rollout `acting` runs, its GAE values by `start`'s value net (`revalue`) or the acting
    policy's: the update's metrics."""
    with BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3, max_episode_steps=20) as batch_env:
        env = TrainingEnv(batch_env, config)
        rollout = Sampler(env, config, np.random.default_rng(5)).rollout(acting)
        batch, _, _ = to_batch(revalued(rollout, start) if revalue else rollout, env, acting, config)
        return learner.update(batch, np.random.default_rng(9))


def test_an_async_worker_in_turn_computes_gaes_values_by_the_weights_it_pulled():
    """`Learner.revalues` (an async worker in turn): the batch is made once the update has pulled the weights
    it starts from, its values by their value net, not by the (older) policy that acted."""
    learners = [Learner(CONFIG, 3, 1) for _ in range(3)] + [Learner(CONFIG.model_copy(update={"seed": 1}), 3, 1)]
    learner, by_hand, by_hand_behaviour_values, other = learners
    try:
        start, acting = learner.initialize(), other.initialize().policy  # acting: other weights (seed 1)
        by_hand.initialize()
        by_hand_behaviour_values.initialize()
        learner.revalues = True  # what a worker in a cluster with async updates in turn sets
        with BatchEnv("Pendulum-v1", 2, envs_per_process=2, seed=3, max_episode_steps=20) as batch_env:
            sampler = Sampler(TrainingEnv(batch_env, CONFIG), CONFIG, np.random.default_rng(5))
            behind = dataclasses.replace(start, policy=acting)
            done = iterate(behind, sampler, learner, CONFIG, np.random.default_rng(9))
        revalued_metrics = _iterate_by_hand(by_hand, acting, start.policy, CONFIG, revalue=True)
        behaviour_metrics = _iterate_by_hand(by_hand_behaviour_values, acting, start.policy, CONFIG, revalue=False)
    finally:
        for each in learners:
            each.close()
    assert done.steps == 64
    for name, value in revalued_metrics.items():
        if not name.endswith("seconds"):
            assert done.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert done.metrics["value_loss"] != pytest.approx(behaviour_metrics["value_loss"], rel=1e-3)
