"""One PPO iteration, top to bottom, next to the paper's Algorithm 1 (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms"):

    for iteration = 1, 2, ... do
        for actor = 1, 2, ..., N do
            Run policy pi_theta_old in environment for T timesteps
            Compute advantage estimates A_1, ..., A_T
        end for
        Optimize surrogate L wrt theta, with K epochs and minibatch size M <= NT
        theta_old <- theta
    end for

The actors are the worker's environments (N = `envs_per_worker`, T = `rollout_steps`, K = `epochs`,
M = NT / `minibatches`); in a cluster every worker runs this loop on the shared weights. `iterate` makes one
call per line of it and delegates the work: each piece holds its own part of the paper and is tested on its
own (tests/trainer/). The loop around it (`loop`) adds evaluations, checkpoints and the outputs.

With config `overlap`, `iterate_overlapped` takes the loop's first line one iteration ahead: the next
rollout runs while this update does, so the rollout an update uses was run by the policy one update older
(`sampling.overlapped`); the rest of the iteration is the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from agents_operator.config import TrainerConfig
from agents_operator.trainer.learner import Learner, LearnerState
from agents_operator.trainer.sampling.batch import Batch, Revaluing, advantage_batch, ended_episodes, observe
from agents_operator.trainer.sampling.overlapped import OverlappedSampler
from agents_operator.trainer.sampling.samplers import RolloutSampler, Sampler
from agents_operator.trainer.sampling.training_env import TrainingEnv


@dataclass
class Iteration:
    """What one iteration did."""

    state: LearnerState
    """The state after it: the updated policy that acts next, the counters and the normaliser statistics."""
    steps: int
    """The transitions it sampled (N x T)."""
    episode_returns: list[float]
    episode_lengths: list[int]
    """Of the episodes that ended in its rollout."""
    metrics: dict[str, float]
    """The update's (`Learner.update`) and the iteration's end's (`Learner.finish_iteration`), by name."""
    sampling_seconds: float
    update_seconds: float


def iterate(
    state: LearnerState,
    sampler: Sampler | RolloutSampler,
    learner: Learner,
    config: TrainerConfig,
    rng: np.random.Generator,
) -> Iteration:
    """One iteration of PPO from `state`; the learner's errors (a lost parameter server) propagate."""
    begin = time.monotonic()
    # "Run policy pi_theta_old in environment for T timesteps": the numpy snapshot of theta_old acts, with
    # noise drawn from `rng` up front, wherever the environments are (`sampling.samplers`, `envs.rollout.run`).
    rollout = sampler.rollout(state.policy)
    # "Compute advantage estimates A_1, ..., A_T": truncated GAE, eq. 11-12, A_t = delta_t + (gamma lambda)
    # delta_{t+1} + ..., delta_t = r_t + gamma V(s_{t+1}) - V(s_t), bootstrapped from V where an episode hit its
    # time limit and after step T; value targets A_t + V(s_t); rewards scaled, observations normalised
    # (`sampling.batch.observe`, `advantage_batch`, `ppo.returns`). An async worker in turn computes them once it
    # has pulled the weights its update starts from, with their values (`Learner.revalues`).
    observe(rollout, sampler.env)
    if learner.revalues:
        batch = Revaluing(rollout, sampler.env, state.policy, config)
    else:
        batch = advantage_batch(rollout, sampler.env, state.policy, config)
    return _learn(batch, sampler.env, learner, rng, begin, ended_episodes(rollout))


def iterate_overlapped(
    state: LearnerState,
    sampler: OverlappedSampler,
    learner: Learner,
    config: TrainerConfig,
    rng: np.random.Generator,
) -> Iteration:
    """`iterate` with the sampling overlapped (`sampling.overlapped`): the rollout it updates on was run by the
    policy one update behind `state.policy`, during the previous update, and the next one runs during this
    update, acted by `state.policy`."""
    begin = time.monotonic()
    # "Run policy pi_theta_old in environment for T timesteps", one iteration ahead: this rollout was run by
    # the policy before theta_old while theta_old was being computed; the next one starts now, with theta_old.
    # No rollout starts that the run would not use: the one after the update that spends its budget.
    last = state.env_steps + config.batch_size >= config.total_steps
    rollout, behaviour = sampler.take(state.policy, start_next=not last)
    # "Compute advantage estimates", as `iterate` does, on the observations as the behaviour policy saw them
    # and with its log-probabilities, so that the ratio of eq. 6 is pi_theta / pi_behaviour.
    batch, episode_returns, episode_lengths = sampler.batch(rollout, behaviour, state.policy)
    return _learn(batch, sampler.env, learner, rng, begin, (episode_returns, episode_lengths))


def _learn(
    batch: Batch | Revaluing,
    env: TrainingEnv,
    learner: Learner,
    rng: np.random.Generator,
    begin: float,
    episodes: tuple[list[float], list[int]],
) -> Iteration:
    """The iteration's second half: the update on `batch` and the iteration's end (sampling began at `begin`)."""
    sampled = time.monotonic()
    # "Optimize surrogate L wrt theta, with K epochs and minibatch size M <= NT": eq. 9, L^CLIP+VF+S =
    # L^CLIP (eq. 7, or section 4's KL-penalised L^KLPEN, eq. 8) - c1 L^VF + c2 S, by Adam with the learning rate
    # annealed by the steps so far (`Learner.update`, `ppo.epochs`, `ppo.objective`, `ppo.losses`).
    metrics = learner.update(batch, rng)
    batch = batch.batch if isinstance(batch, Revaluing) else batch
    # "theta_old <- theta", and section 4's adaptation of the KL penalty's beta to d = KL[pi_old, pi]
    # ("if d < d_targ / 1.5, beta <- beta / 2; if d > d_targ x 1.5, beta <- beta x 2", as BatchPPO adapts it:
    # `ppo.losses.adapted_kl_beta`); the steps and normaliser sums counted (`Learner.finish_iteration`).
    observations, returns = env.observations.take_pending(), env.rewards.statistics.take_pending()
    state, finished = learner.finish_iteration(batch, len(batch), observations, returns)
    updated = time.monotonic()
    return Iteration(
        state=state,
        steps=len(batch),
        episode_returns=episodes[0],
        episode_lengths=episodes[1],
        metrics={**metrics, **finished},
        sampling_seconds=sampled - begin,
        update_seconds=updated - sampled,
    )
