"""Rollouts: the one sampling loop (`run`) and what it returns (`Rollout`).

`run` steps a batch of environments through a rollout with a snapshot of the policy (a `NumpyPolicy` and
the observation statistics), group by group (`groups` of the batch: a worker process, an env server): as
soon as one group's step returns, the policy acts for it and sends it on while the others simulate. It
runs wherever the policy acts:
- in each worker process of a `BatchEnv`, for that process's environments (`BatchEnv.collect`): the
  trainer's colocated sampling (`sampling.samplers.Sampler`) and an env server's rollout mode, with no
  exchange per step;
- in the trainer, over env servers in step mode (`sampling.samplers.StepSampler`), one round trip per step
  and server.
`sampling.batch.to_batch` then feeds the trainer's observation normaliser and reward scaler in time order and
builds the PPO `Batch`.

The trainer draws a rollout's noise from its own random generator up front, and every group acts with its
own rows of it, so a rollout does not depend on where it was collected or on timing: same seeds, weights
and grouping of the environments, same batch, bit for bit (tested). The grouping matters only through
rounding: BLAS computes the policy's matrix products on a group's rows, and rounds them differently for
other row counts. One difference is deliberate: the trainer's own samplers act on the first observation
of a rollout as it was normalised at the end of the previous one (`first_acting`); in rollout mode the
servers normalise every observation of a rollout with that rollout's statistics. Both are equal while
the statistics do not change.

Numpy only: worker processes and env servers import no TensorFlow (tests/test_layering.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

from agents_operator.trainer.envs.noise import Noise
from agents_operator.trainer.envs.types import StepResult
from agents_operator.trainer.ppo.normalize import Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy


@dataclass
class Rollout:
    """T steps of n environments as the policy lived them; time-major arrays, raw (unnormalised) values but
    for `acting`."""

    observations: np.ndarray
    """(T + 1, n, *obs_shape) float32: the observation each step acted on, then the one after the last step.
    Where an episode ended, the next row holds the next episode's first observation."""
    acting: np.ndarray
    """(T + 1, n, *obs_shape) float32: `observations` normalised as the policy saw them: what each step acted
    on, then what the last value was computed on (`ppo.normalize`, per step or fixed per rollout)."""
    actions: np.ndarray
    """(T, n, act_dim) float32: sampled, before clipping to the action bounds."""
    log_probs: np.ndarray
    """(T, n) float32."""
    means: np.ndarray
    """(T, n, act_dim) float32: the Gaussian means."""
    values: np.ndarray
    """(T, n) float32: V of the normalised observation each step acted on."""
    rewards: np.ndarray
    """(T, n) float32, raw."""
    terminated: np.ndarray
    """(T, n) bool."""
    truncated: np.ndarray
    """(T, n) bool."""
    final_values: np.ndarray
    """(T, n) float32: V of the episode's final observation where it was truncated, else 0."""
    last_values: np.ndarray
    """(n,) float32: V of the observation after the last step."""
    episode_steps: np.ndarray
    """(E,) int64: the step in which each episode that ended in the rollout ended..."""
    episode_envs: np.ndarray
    """(E,) int64: ...in which environment..."""
    episode_returns: np.ndarray
    """(E,) float64: ...its undiscounted return..."""
    episode_lengths: np.ndarray
    """(E,) int64: ...and its length; ordered by step, then environment."""
    restarted: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    """(n,) bool, set by the client: environments whose server was reset before this rollout after a
    failure; the episode they were in was discarded and observations[0] starts a new one."""
    simulation_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """(P,) float64: for each process that simulated the rollout's environments and acted for them (a
    `BatchEnv` worker process, here or in an env server), the seconds it spent stepping them, resets
    included; empty where the policy acted elsewhere (`run` over env servers in step mode). Against the
    rollout's wall time it says how much of sampling was the simulator itself (`simulation_share`)."""

    OPTIONAL = ("restarted", "simulation_seconds")
    """Fields a message may lack: `restarted` is the client's own, and env servers of earlier versions do
    not time their simulation."""

    def to_message(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "restarted"}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Rollout:
        required = [f.name for f in fields(cls) if f.name not in cls.OPTIONAL]
        if missing := [name for name in required if name not in message]:
            raise ValueError(f"a rollout reply lacks {', '.join(missing)}: an env server of another version?")
        rollout = cls(**{name: message[name] for name in required})
        rollout.restarted = np.zeros(rollout.rewards.shape[1], bool)
        rollout.simulation_seconds = np.asarray(message.get("simulation_seconds", ()), np.float64).reshape(-1)
        return rollout

    @classmethod
    def concatenate(cls, parts: list[Rollout]) -> Rollout:
        """The rollouts of consecutive groups of environments as one (environment indices shifted)."""
        time_major = ("observations", "acting", "actions", "log_probs", "means", "values", "rewards")
        time_major += ("terminated", "truncated", "final_values")
        merged = {name: np.concatenate([getattr(part, name) for part in parts], axis=1) for name in time_major}
        stacked = ("last_values", "restarted", "simulation_seconds")
        stacked += ("episode_steps", "episode_returns", "episode_lengths")
        for name in stacked:
            merged[name] = np.concatenate([getattr(part, name) for part in parts])
        offsets = np.cumsum([0] + [part.rewards.shape[1] for part in parts[:-1]])
        merged["episode_envs"] = np.concatenate([p.episode_envs + o for p, o in zip(parts, offsets, strict=True)])
        order = np.lexsort((merged["episode_envs"], merged["episode_steps"]))
        for name in ("episode_steps", "episode_envs", "episode_returns", "episode_lengths"):
            merged[name] = merged[name][order]
        return cls(**merged)


class Groups(Protocol):
    """What `run` steps: a batch of environments in consecutive groups that step independently of one
    another (`BatchEnv`, `RemoteBatchEnv`, a worker's own environments)."""

    @property
    def groups(self) -> list[range]: ...

    def send_step(self, group: int, actions: np.ndarray) -> None: ...

    def receive_step(self, group: int) -> StepResult: ...


class _Record:
    """What `run` writes as the rollout goes: the time-major arrays of a `Rollout` and its ended episodes."""

    def __init__(self, observations: np.ndarray, noise: Noise):
        steps, n, act_dim = noise.steps, noise.num_envs, noise.action_dim
        self.observations = np.empty((steps + 1, n, *observations.shape[1:]), np.float32)
        self.observations[0] = observations
        self.acting = np.empty_like(self.observations)
        self.actions, self.means = (np.empty((steps, n, act_dim), np.float32) for _ in range(2))
        self.log_probs, self.values, self.rewards = (np.empty((steps, n), np.float32) for _ in range(3))
        self.final_values = np.zeros((steps, n), np.float32)
        self.terminated, self.truncated = (np.empty((steps, n), bool) for _ in range(2))
        self.ended_steps: list[int] = []
        self.ended_envs: list[int] = []
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []

    def step(self, t: int, rows: slice, step: StepResult, policy: NumpyPolicy, normalizer: Normalizer) -> None:
        """Record step `t` of the environments `rows`, counting its observations in `normalizer` (per step);
        value the final observations of truncated episodes."""
        self.observations[t + 1, rows], self.rewards[t, rows] = step.observations, step.rewards
        normalizer.advance(step.observations)
        self.terminated[t, rows], self.truncated[t, rows] = step.terminated, step.truncated
        if step.truncated.any():
            self.final_values[t, rows][step.truncated] = policy.value_of(
                normalizer.normalize(step.final_observations[step.truncated])
            )
        ended = (np.flatnonzero(step.terminated | step.truncated) + rows.start).tolist()
        self.ended_steps += [t] * len(ended)
        self.ended_envs += ended
        self.episode_returns += step.episode_returns
        self.episode_lengths += step.episode_lengths

    def rollout(self, last_values: np.ndarray) -> Rollout:
        return Rollout(
            observations=self.observations,
            acting=self.acting,
            actions=self.actions,
            log_probs=self.log_probs,
            means=self.means,
            values=self.values,
            rewards=self.rewards,
            terminated=self.terminated,
            truncated=self.truncated,
            final_values=self.final_values,
            last_values=last_values,
            episode_steps=np.array(self.ended_steps, np.int64),
            episode_envs=np.array(self.ended_envs, np.int64),
            episode_returns=np.array(self.episode_returns, np.float64),
            episode_lengths=np.array(self.episode_lengths, np.int64),
            restarted=np.zeros(self.rewards.shape[1], bool),
        )


def run(
    env: Groups,
    observations: np.ndarray,
    policy: NumpyPolicy,
    normalizer: Normalizer,
    noise: Noise,
    first_acting: np.ndarray | None = None,
) -> Rollout:
    """`noise.steps` steps of `env` from its current raw `observations`, acting with `policy`: per step,
    normalise, act with that step's noise, value, step; the value of a truncated episode's final observation
    for bootstrapping. `first_acting` is what the first step acts on, if not `observations` normalised now.
    Each group normalises with a `snapshot` of `normalizer` of its own, which it advances with its own
    observations where the statistics are updated per step (as a worker process does on its own).

    Each group of environments (`env.groups`: a worker process, an env server) runs through the rollout on
    its own: as soon as a group's step returns, the policy acts for it and sends it on while the other
    groups are still simulating, so that neither the policy nor the slowest group keeps the others waiting.
    A group's actions depend only on its own observations and its rows of `noise`, so the rollout is the
    same whatever the timing; the numbers depend on the grouping only through the rounding of the
    policy's matrix products, which differs with the number of rows they are computed on.
    """
    steps = noise.steps
    record = _Record(observations, noise)
    groups = [slice(envs.start, envs.stop) for envs in env.groups]
    draw = policy.act_held if noise.held else policy.act
    normalizers = [normalizer.snapshot() for _ in groups]

    def act(t: int, group: int, acting: np.ndarray) -> None:
        rows = groups[group]
        record.acting[t, rows] = acting
        record.actions[t, rows], record.log_probs[t, rows], record.means[t, rows] = draw(acting, noise.at(t, rows))
        record.values[t, rows] = policy.value_of(acting)
        env.send_step(group, record.actions[t, rows])

    for group, rows in enumerate(groups):
        act(0, group, normalizers[group].normalize(observations[rows]) if first_acting is None else first_acting[rows])
    for t in range(steps):
        for group, rows in enumerate(groups):
            step = env.receive_step(group)
            record.step(t, rows, step, policy, normalizers[group])
            if t + 1 < steps:
                act(t + 1, group, normalizers[group].normalize(step.observations))
    last = []
    for group, rows in enumerate(groups):
        record.acting[steps, rows] = normalizers[group].normalize(record.observations[steps, rows])
        last.append(policy.value_of(record.acting[steps, rows]))
    return record.rollout(np.concatenate(last))


def simulation_share(simulation_seconds: np.ndarray, seconds: float) -> float | None:
    """The share of the simulating processes' time, during a sampling phase of `seconds`, that went to stepping
    the environments (`Rollout.simulation_seconds`; the rest: acting, normalising, exchanges, waiting);
    None when no process timed it."""
    if not len(simulation_seconds) or seconds <= 0:
        return None
    return float(simulation_seconds.sum() / (seconds * len(simulation_seconds)))
