"""Overlapped sampling (config `overlap`): the next rollout is collected while the learner updates on this one.

The double-buffered sampling of Sample Factory (Petrenko et al. 2020), at a policy lag of exactly one update:
while the learner turns theta_k into theta_k+1 on rollout k, the environments collect rollout k+1 with
theta_k, the policy the update starts from, and the statistics the observations were normalised with then.
Rollout k itself was acted by theta_k-1. Its batch (`overlapped_batch`) keeps what that behaviour policy
stored: its actions' log-probabilities, its Gaussians, the observations as it saw them
(`Rollout.acting`). PPO's objective is then decoupled PPO's (Hilton et al. 2021, `ppo.losses.behaviour_weights`):
the clip is taken around theta_k (`ProximalBatch.proximal_log_probs`), and each sample is weighted by
pi_theta_k / pi_behaviour, so the update is the clipped surrogate importance-sampled from what acted. Clipped
around the behaviour instead, a Pendulum run learned far less at the same steps (docs/trainer.md,
"Overlapped sampling"). The values GAE uses are `overlap_values`: `recomputed` by theta_k's value net
(`revalued`), or the behaviour's, as computed while acting.

The rollout in flight runs in a thread of this process (`_InFlight`): where the policy acts in the worker
processes or on env servers, the thread only waits on them; in step mode it acts too. It reads a snapshot of
the observation statistics and the noise drawn here beforehand, so the random generator is used in one
order whatever the timing, and the batches are the same for the same seeds. Anything else that uses the
environments (an evaluation, the final video) first `settle`s the rollout in flight; after a lost parameter
server, or at the end of a run, it is `discard`ed, so that no batch ever lags by more than one update. No
rollout starts during the update that spends the run's budget.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from agents_operator.config import TrainerConfig
from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.rollout import Rollout
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from agents_operator.trainer.sampling.batch import Batch, revalued, to_batch
from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler
from agents_operator.trainer.sampling.training_env import TrainingEnv


@dataclass
class ProximalBatch(Batch):
    """The batch of a rollout acted by a policy older than the one the update starts from."""

    proximal_log_probs: np.ndarray
    """The actions' log-probabilities under the policy the update starts from, which PPO's clip is taken
    around, while `log_probs` (the behaviour's) weigh the samples (`ppo.losses.behaviour_weights`)."""


@dataclass
class Behaviour:
    """What a rollout acted with: the policy and the observation statistics."""

    policy: NumpyPolicy
    normalizer: Normalizer


class _InFlight:
    """One rollout collected in a daemon thread: `result` waits for it, or raises what the thread raised.

    Daemon, so that a rollout stuck on a lost environment never keeps the process from exiting; closing the
    environments (which kills their processes or channels) ends it.
    """

    def __init__(self, sampler: Sampler | RolloutSampler, behaviour: Behaviour, noise: Noise):
        self.behaviour = behaviour
        self._outcome: tuple[Rollout | None, BaseException | None] = (None, None)

        def collect() -> None:
            try:
                self._outcome = (sampler.rollout_with(behaviour.policy, behaviour.normalizer, noise), None)
            except BaseException as error:  # re-raised by `result`, in the learner's thread
                self._outcome = (None, error)

        self._thread = threading.Thread(target=collect, name="overlapped-rollout", daemon=True)
        self._thread.start()

    def result(self) -> Rollout:
        self._thread.join()
        rollout, error = self._outcome
        if error is not None:
            raise error
        assert rollout is not None
        return rollout


class OverlappedSampler:
    """A sampler (`samplers.for_placement`) whose next rollout runs while the learner updates (module
    docstring); `take` hands out the rollouts in order, each with its `Behaviour`."""

    def __init__(self, sampler: Sampler | RolloutSampler, config: TrainerConfig):
        self.sampler = sampler
        self.config = config
        self._in_flight: _InFlight | None = None
        self._held: tuple[Rollout, Behaviour] | None = None
        self._blas = ThreadpoolController()

    @property
    def env(self) -> TrainingEnv:
        return self.sampler.env

    @property
    def simulation_seconds(self) -> np.ndarray:
        """None of the rollouts' simulation is timed against a sampling phase here: the learner's wait is not
        the rollout's wall time (`envs.rollout.simulation_share` says None)."""
        return np.zeros(0)

    def take(self, policy: NumpyPolicy, start_next: bool = True) -> tuple[Rollout, Behaviour]:
        """The next rollout and what acted it (waiting for it if it is still running); with `start_next`
        (false for the update that ends the run), the one after it is started with `policy` and the
        statistics as they are now. The first call collects its rollout with `policy` first: nothing ran
        before it."""
        if self._held is None and self._in_flight is None:
            self._start(policy)
        self.settle()
        assert self._held is not None
        rollout, self._held = self._held, None
        if start_next:
            self._start(policy)
        return rollout

    def batch(
        self, rollout: Rollout, behaviour: Behaviour, policy: NumpyPolicy
    ) -> tuple[ProximalBatch, list[float], list[int]]:
        """`overlapped_batch`, with numpy's BLAS on one thread: the next rollout's processes are filling every
        core meanwhile, and OpenBLAS's threads, waiting for one another behind them, once stalled a 30 ms
        batch for 3 s (docs/trainer.md, "Overlapped sampling")."""
        with self._blas.limit(limits=1, user_api="blas"):
            return overlapped_batch(rollout, behaviour, self.env, policy, self.config)

    def settle(self) -> None:
        """Wait for the rollout in flight, if any, and keep it for `take`: the environments are free."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            self._held = (in_flight.result(), in_flight.behaviour)

    def discard(self) -> None:
        """Wait for the rollout in flight, if any, and drop it with any held one: the next `take`
        collects with its own policy first (after a lost ps the live policy may be far from the one that
        acted)."""
        try:
            self.settle()
        finally:
            self._held = None

    def _start(self, policy: NumpyPolicy) -> None:
        behaviour = Behaviour(policy, self.env.observations.snapshot())
        self._in_flight = _InFlight(self.sampler, behaviour, self.sampler.noise(policy))


def overlapped_batch(
    rollout: Rollout, behaviour: Behaviour, env: TrainingEnv, policy: NumpyPolicy, config: TrainerConfig
) -> tuple[ProximalBatch, list[float], list[int]]:
    """`to_batch` of a rollout acted by `behaviour`, one update behind `policy` (the one the update starts from):
    observations as the behaviour saw them, its log-probabilities and Gaussians; values per `overlap_values`."""
    if config.overlap_values == "recomputed":
        rollout = revalued(rollout, policy)
    batch, returns, lengths = to_batch(rollout, env, behaviour.policy, config)
    proximal = policy.log_prob(batch.observations, batch.actions)
    return ProximalBatch(**vars(batch), proximal_log_probs=proximal), returns, lengths
