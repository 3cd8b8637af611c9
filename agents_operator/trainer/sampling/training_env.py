"""A batch of environments with the statistics that normalise its observations and scale its rewards."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.ppo.normalize import Normalizer, RewardScaler

if TYPE_CHECKING:  # for annotations only: colocated training loads no gRPC
    from agents_operator.trainer.envs.batch import BatchEnv
    from agents_operator.trainer.envserver.client import RemoteBatchEnv


class TrainingEnv:
    """A `BatchEnv` or `RemoteBatchEnv` (both clip actions) with the statistics that normalise its
    observations and scale its rewards; `batch.to_batch` feeds them a rollout at a time."""

    def __init__(self, env: BatchEnv | RemoteBatchEnv, config: TrainerConfig):
        self.env = env
        self.observations = Normalizer(
            env.observation_shape,
            config.clip_observations,
            config.normalize_observations,
            per_step=config.observation_statistics == "step",
        )
        self.rewards = RewardScaler(env.num_envs, config.discount, config.clip_rewards, config.normalize_rewards)

    def reset(self) -> np.ndarray:
        """Reset every environment and count the first observations in the statistics; returns them raw."""
        observations = self.env.reset()
        self.observations.observe(observations)
        return observations
