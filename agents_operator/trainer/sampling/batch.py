"""The PPO batch of one iteration (`Batch`), and how a rollout becomes one (`to_batch`).

TensorFlow-free: the learner consumes a `Batch`, but sampling never imports the learner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.ppo import returns
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.training_env import TrainingEnv


@dataclass
class Batch:
    """One iteration's transitions, flattened to (B, ...): what the update consumes."""

    observations: np.ndarray  # normalised
    actions: np.ndarray  # sampled, before clipping to the action bounds
    log_probs: np.ndarray
    means: np.ndarray  # the acting policy's Gaussian means (for the exact KL)
    log_std: np.ndarray  # the acting policy's log-std, (act_dim,), or (B, act_dim) when state-dependent
    values: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray

    def __len__(self) -> int:
        return len(self.observations)


def to_batch(
    rollout: Rollout, env: TrainingEnv, policy: NumpyPolicy, config: TrainerConfig
) -> tuple[Batch, list[float], list[int]]:
    """The PPO batch, episode returns and lengths of a rollout acted by `policy`, on its observations as the
    policy saw them (`Rollout.acting`).

    Feeds `env`'s observation normaliser and reward scaler with the rollout, step by step in time order,
    scales the rewards, and computes GAE with bootstrapping from `final_values` at truncations and from
    `last_values` after the last step.
    """
    steps, n = rollout.rewards.shape
    if rollout.restarted.any():
        # The discarded episodes' discounted returns must not run on into the new ones.
        env.rewards.returns[rollout.restarted] = 0.0
        env.observations.observe(rollout.observations[0][rollout.restarted])
    done = rollout.terminated | rollout.truncated
    for t in range(steps):
        env.observations.observe(rollout.observations[t + 1])
        env.rewards.track(rollout.rewards[t], done[t])
    next_values = returns.next_values(rollout.values, rollout.last_values, rollout.final_values, done)
    advantages, value_targets = returns.gae(
        env.rewards.scale(rollout.rewards),
        rollout.values,
        next_values,
        rollout.terminated,
        rollout.truncated,
        config.discount,
        config.gae_lambda,
    )
    observations = rollout.acting[:steps].reshape(steps * n, -1)
    batch = Batch(
        observations=observations,
        actions=rollout.actions.reshape(steps * n, -1),
        log_probs=rollout.log_probs.reshape(-1),
        means=rollout.means.reshape(steps * n, -1),
        log_std=(policy.gaussian(observations)[1] if policy.state_dependent else policy.log_std).astype(np.float32),
        values=rollout.values.reshape(-1),
        advantages=advantages.reshape(-1),
        returns=value_targets.reshape(-1),
    )
    return batch, rollout.episode_returns.tolist(), rollout.episode_lengths.tolist()
