"""One PPO iteration (trainer/iteration.py): a rollout of N x T transitions by the acting policy, its batch,
the update, and the end of the iteration that counts it and pushes the normalisers' sums; the same as those
steps taken by hand from the same state and random numbers."""

import numpy as np
import pytest

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.batch import BatchEnv
from agents_operator.trainer.iteration import iterate
from agents_operator.trainer.learner import Learner
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
