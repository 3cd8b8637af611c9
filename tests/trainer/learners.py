"""A small learner and batches for it, shared by the learner's and the checkpoints' tests."""

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.learner import Batch

OBS, ACT = 3, 2


def small_config(**settings):
    small = dict(envs_per_worker=4, rollout_steps=8, minibatches=4, epochs=3, policy_layers=[16], value_layers=[16])
    return TrainerConfig(**{**small, **settings})


def batch_for(learner_state, size=32, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(size, OBS)).astype(np.float32)
    policy = learner_state.policy
    actions, log_probs, means = policy.act(obs, rng.standard_normal((size, ACT), dtype=np.float32))
    values = policy.value_of(obs).astype(np.float32)
    advantages = rng.normal(size=size).astype(np.float32)
    return Batch(obs, actions, log_probs, means, policy.log_std, values, advantages, values + advantages)
