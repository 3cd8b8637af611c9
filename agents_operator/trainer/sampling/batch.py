"""The PPO batch of one iteration (`Batch`), and how a rollout becomes one (`to_batch`, or later: `Revaluing`).

TensorFlow-free: the learner consumes a `Batch`, but sampling never imports the learner.
"""

from __future__ import annotations

import dataclasses
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
    policy saw them (`Rollout.acting`): `observe`, then `advantage_batch`."""
    observe(rollout, env)
    return advantage_batch(rollout, env, policy, config), *ended_episodes(rollout)


def observe(rollout: Rollout, env: TrainingEnv) -> None:
    """Feed `env`'s observation normaliser and reward scaler with the rollout, step by step in time order."""
    if rollout.restarted.any():
        # The discarded episodes' discounted returns must not run on into the new ones.
        env.rewards.returns[rollout.restarted] = 0.0
        env.observations.observe(rollout.observations[0][rollout.restarted])
    done = rollout.terminated | rollout.truncated
    for t in range(len(rollout.rewards)):
        env.observations.observe(rollout.observations[t + 1])
        env.rewards.track(rollout.rewards[t], done[t])


def ended_episodes(rollout: Rollout) -> tuple[list[float], list[int]]:
    """The returns and lengths of the episodes that ended in the rollout."""
    return rollout.episode_returns.tolist(), rollout.episode_lengths.tolist()


def advantage_batch(rollout: Rollout, env: TrainingEnv, policy: NumpyPolicy, config: TrainerConfig) -> Batch:
    """The PPO batch of a rollout acted by `policy` whose statistics `env` has observed: rewards scaled, GAE
    with bootstrapping from `final_values` at truncations and from `last_values` after the last step."""
    steps, n = rollout.rewards.shape
    done = rollout.terminated | rollout.truncated
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
    return Batch(
        observations=observations,
        actions=rollout.actions.reshape(steps * n, -1),
        log_probs=rollout.log_probs.reshape(-1),
        means=rollout.means.reshape(steps * n, -1),
        log_std=(policy.gaussian(observations)[1] if policy.state_dependent else policy.log_std).astype(np.float32),
        values=rollout.values.reshape(-1),
        advantages=advantages.reshape(-1),
        returns=value_targets.reshape(-1),
    )


def revalued(rollout: Rollout, policy: NumpyPolicy) -> Rollout:
    """`rollout` with its values and last values computed by `policy`'s value net, on the observations as
    they were normalised when acted on (`Rollout.acting`). The final values of truncated episodes stay the
    behaviour's: a rollout holds their values, not their final observations."""
    steps = len(rollout.rewards)
    values = policy.value_of(rollout.acting[:steps]).astype(np.float32)
    last_values = policy.value_of(rollout.acting[steps]).astype(np.float32)
    return dataclasses.replace(rollout, values=values, last_values=last_values)


@dataclass
class Revaluing:
    """The batch of a rollout whose GAE values wait for the weights its update starts from (`resolve`): an
    async worker's in turn (`Learner.revalues`), which pulls the weights the other workers pushed since its
    rollout only once it holds the turn. `env` has observed the rollout already."""

    rollout: Rollout
    env: TrainingEnv
    policy: NumpyPolicy  # what acted
    config: TrainerConfig
    batch: Batch | None = None  # the batch `resolve` made

    def resolve(self, start: NumpyPolicy) -> Batch:
        """The batch with GAE's values (and last values) computed by `start`'s value net."""
        self.batch = advantage_batch(revalued(self.rollout, start), self.env, self.policy, self.config)
        return self.batch
