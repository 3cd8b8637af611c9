"""A small trainer config and random numpy policies for it: what acts in the tests of environments, env servers
and samplers."""

from __future__ import annotations

import itertools

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo.policy import NumpyPolicy


def random_policy(config: TrainerConfig, obs_dim: int, act_dim: int, seed: int = 0) -> NumpyPolicy:
    rng = np.random.default_rng(seed)

    def layers(sizes: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        return [
            (rng.normal(0, 0.5, (fan_in, fan_out)).astype(np.float32), rng.normal(0, 0.1, fan_out).astype(np.float32))
            for fan_in, fan_out in itertools.pairwise(sizes)
        ]

    policy = layers([obs_dim, *config.policy_layers, act_dim])
    value = layers([obs_dim, *config.value_layers, 1])
    return NumpyPolicy(policy, np.full(act_dim, -0.5, np.float32), value, config.activation)


ROLLOUT_CONFIG = TrainerConfig(
    env_id="Pendulum-v1",
    envs_per_worker=3,
    rollout_steps=30,
    minibatches=1,
    max_episode_steps=20,
    policy_layers=[16, 16],
    value_layers=[16, 16],
)
