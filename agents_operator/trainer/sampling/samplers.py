"""The trainer's samplers: each turns rollouts of its batch of environments into PPO batches, one per iteration.

Which one runs depends on where the environments are (`for_placement`): `Sampler` for the worker's own
`BatchEnv` (the policy acts in its worker processes), `StepSampler` for env servers stepped one step at a time
(the policy acts here), `RolloutSampler` for env servers that collect whole rollouts. All three use the random
generator alike, so the batches do not depend on the placement (see `envs.rollout`).
"""

from __future__ import annotations

import abc

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.rollout import Rollout, run
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.batch import Batch, to_batch
from agents_operator.trainer.sampling.training_env import TrainingEnv


class _Sampling(abc.ABC):
    """What every sampler does alike: draw a rollout's noise, and `collect` (a rollout, then its batch)."""

    simulation_seconds: np.ndarray
    """The last rollout's (`Rollout.simulation_seconds`)."""

    env: TrainingEnv
    config: TrainerConfig
    rng: np.random.Generator

    @abc.abstractmethod
    def rollout(self, policy: NumpyPolicy) -> Rollout:
        """A rollout of `rollout_steps` x `num_envs` transitions."""

    @abc.abstractmethod
    def rollout_with(self, policy: NumpyPolicy, normalizer: Normalizer, noise: Noise) -> Rollout:
        """A rollout acted by `policy` from `noise` on every observation normalised with `normalizer`'s
        statistics, its first ones included. It reads nothing else the learner's side changes, so that it can
        run in a thread of its own while the learner updates (`overlapped`)."""

    def collect(self, policy: NumpyPolicy) -> tuple[Batch, list[float], list[int]]:
        """`rollout`, then `to_batch`: the PPO batch and the episodes that ended in the rollout."""
        return to_batch(self.rollout(policy), self.env, policy, self.config)

    def settle(self) -> None:
        """Nothing runs between two calls of a serial sampler: the environments are free (`overlapped` waits)."""
        return

    def discard(self) -> None:
        """Nothing runs between two calls of a serial sampler: nothing to drop (`overlapped` drops its rollout)."""
        return

    def noise(self, policy: NumpyPolicy) -> Noise:
        """A rollout's noise from the sampler's generator: per step, or held exploration weights
        (`exploration_hold`, `envs.noise`)."""
        steps, hold = self.config.rollout_steps, self.config.exploration_hold
        return Noise.draw(self.rng, steps, self.env.env.num_envs, policy.log_std, hold)


class Sampler(_Sampling):
    """Colocated sampling: turns rollouts of a `BatchEnv` into PPO batches, the policy acting in the worker
    processes for their own environments (`BatchEnv.collect`), with no exchange per step.

    Every rollout acts on its first observations as they were normalised for the previous one's last value.
    """

    def __init__(self, env: TrainingEnv, config: TrainerConfig, rng: np.random.Generator):
        self.env = env
        self.config = config
        self.rng = rng
        self.raw_observations = env.reset()
        self.observations = env.observations.snapshot().normalize(self.raw_observations)
        self.simulation_seconds = np.zeros(0)

    def rollout(self, policy: NumpyPolicy) -> Rollout:
        rollout = self._rollout_with(policy, self.env.observations, self.noise(policy), self.observations)
        self.simulation_seconds = rollout.simulation_seconds
        self.raw_observations, self.observations = rollout.observations[-1], rollout.acting[-1]
        return rollout

    def rollout_with(self, policy: NumpyPolicy, normalizer: Normalizer, noise: Noise) -> Rollout:
        rollout = self._rollout_with(policy, normalizer, noise, None)
        self.simulation_seconds = rollout.simulation_seconds
        self.raw_observations = rollout.observations[-1]
        return rollout

    def _rollout_with(
        self, policy: NumpyPolicy, normalizer: Normalizer, noise: Noise, first_acting: np.ndarray | None
    ) -> Rollout:
        return self.env.env.collect(policy, normalizer, noise, first_acting)


class StepSampler(Sampler):
    """`Sampler` over env servers in step mode: the policy acts here, one round trip per step and server
    (`envs.rollout.run`, the servers pipelined). Same batches as `Sampler` over a `BatchEnv` grouped as the
    servers are."""

    def _rollout_with(
        self, policy: NumpyPolicy, normalizer: Normalizer, noise: Noise, first_acting: np.ndarray | None
    ) -> Rollout:
        return run(self.env.env, self.raw_observations, policy, normalizer, noise, first_acting)


class RolloutSampler(_Sampling):
    """A drop-in for `Sampler` over env servers in rollout mode: the servers collect whole rollouts
    (`RemoteBatchEnv.collect`), normalising a rollout's first observations with its own statistics (see
    `envs.rollout`); the random generator is used exactly as `Sampler` uses it."""

    def __init__(self, env: TrainingEnv, config: TrainerConfig, rng: np.random.Generator):
        self.env = env
        self.config = config
        self.rng = rng
        env.reset()
        self.simulation_seconds = np.zeros(0)

    def rollout(self, policy: NumpyPolicy) -> Rollout:
        return self.rollout_with(policy, self.env.observations, self.noise(policy))

    def rollout_with(self, policy: NumpyPolicy, normalizer: Normalizer, noise: Noise) -> Rollout:
        rollout = self.env.env.collect(policy, normalizer, noise)
        self.simulation_seconds = rollout.simulation_seconds
        return rollout


def for_placement(
    env: TrainingEnv, config: TrainerConfig, rng: np.random.Generator, env_servers: EnvServers | None
) -> Sampler | RolloutSampler:
    """Colocated sampling, env servers stepped per step, or whole rollouts collected by the env servers."""
    if env_servers is None:
        return Sampler(env, config, rng)
    if env_servers.mode == "rollout":
        return RolloutSampler(env, config, rng)
    return StepSampler(env, config, rng)
