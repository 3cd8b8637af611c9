"""Rollouts: the sampling loop every sampler runs, and rollout mode, where an env server runs it.

`run` steps a batch of environments for a rollout with a snapshot of the policy. The trainer's own
sampler (`loop.Sampler`) runs it over its `BatchEnv` or, in step mode, over its env servers
(`RemoteBatchEnv`, one round trip per step); `to_batch` turns the `Rollout` into the PPO `Batch`.

Rollout mode is for slow or far-away sources (a robot, a simulator across a network), where one round
trip per environment step costs too much. The trainer sends the policy's weights, its observation
statistics and the rollout's Gaussian noise; the server runs the same `run` for `rollout_steps` steps and
returns the complete trajectories, and `RolloutSampler` builds the batch from them.

The trainer draws the noise from its own random generator, a whole rollout at once, so a rollout does not
depend on where it was collected: same seeds, weights and grouping of the environments, same batch
(tested bit for bit against the local sampler). One difference is deliberate: `loop.Sampler` acts on the
first observation of a rollout as it was normalised at the end of the previous one; rollout mode
normalises every observation of a rollout with the statistics of that rollout. Both are equal while the
statistics do not change.

The server side (`run`) imports no TensorFlow; `to_batch` needs the trainer's `loop.rollout_batch` and imports it late.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from agents_operator.trainer.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.networks import NumpyPolicy

if TYPE_CHECKING:
    from agents_operator.config import TrainerConfig
    from agents_operator.trainer.envs import BatchEnv
    from agents_operator.trainer.envserver.client import RemoteBatchEnv
    from agents_operator.trainer.learner import Batch
    from agents_operator.trainer.wrappers import TrainingEnv


@dataclass
class Rollout:
    """T steps of n environments as the policy lived them; time-major arrays, raw (unnormalised) values."""

    observations: np.ndarray
    """(T + 1, n, *obs_shape) float32: the observation each step acted on, then the one after the last step.
    Where an episode ended, the next row holds the next episode's first observation."""
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

    def to_message(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "restarted"}

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Rollout:
        rollout = cls(**{f.name: message[f.name] for f in fields(cls) if f.name != "restarted"})
        rollout.restarted = np.zeros(rollout.rewards.shape[1], bool)
        return rollout

    @classmethod
    def concatenate(cls, parts: list[Rollout]) -> Rollout:
        """The rollouts of consecutive groups of environments as one (environment indices shifted)."""
        time_major = ("observations", "actions", "log_probs", "means", "values", "rewards", "terminated")
        time_major += ("truncated", "final_values")
        merged = {name: np.concatenate([getattr(part, name) for part in parts], axis=1) for name in time_major}
        for name in ("last_values", "restarted", "episode_steps", "episode_returns", "episode_lengths"):
            merged[name] = np.concatenate([getattr(part, name) for part in parts])
        offsets = np.cumsum([0] + [part.rewards.shape[1] for part in parts[:-1]])
        merged["episode_envs"] = np.concatenate([p.episode_envs + o for p, o in zip(parts, offsets, strict=True)])
        order = np.lexsort((merged["episode_envs"], merged["episode_steps"]))
        for name in ("episode_steps", "episode_envs", "episode_returns", "episode_lengths"):
            merged[name] = merged[name][order]
        return cls(**merged)


# --- the request --------------------------------------------------------------------------------------


def policy_message(policy: NumpyPolicy, observations: Normalizer) -> dict[str, Any]:
    """The policy and the observation statistics it acts with, as Collect and Evaluate requests carry them."""
    weights = [array for layer in policy.policy for array in layer] + [policy.log_std]
    weights += [array for layer in policy.value for array in layer]
    moments = observations.shared
    return {
        "weights": weights,
        "num_policy_layers": len(policy.policy),
        "activation": policy.activation,
        "observation_moments": [moments.count, np.asarray(moments.sum), np.asarray(moments.sumsq)],
        "clip_observations": observations.clip,
        "normalize_observations": observations.enabled,
    }


def request(policy: NumpyPolicy, observations: Normalizer, noise: np.ndarray) -> dict[str, Any]:
    """A Collect request (without the session): the policy, the observation statistics and the noise."""
    return {**policy_message(policy, observations), "noise": noise}


def parse_request(message: dict[str, Any], observation_shape: tuple[int, ...]) -> tuple[NumpyPolicy, Normalizer]:
    """The policy and the normaliser of a Collect or Evaluate request, as the trainer had them."""
    policy = NumpyPolicy.from_values(list(message["weights"]), message["num_policy_layers"], message["activation"])
    normalizer = Normalizer(observation_shape, message["clip_observations"], message["normalize_observations"])
    count, total, squares = message["observation_moments"]
    normalizer.shared = Moments(float(count), total, squares)
    return policy, normalizer


# --- the server side ----------------------------------------------------------------------------------


def run(
    env: BatchEnv | RemoteBatchEnv,
    observations: np.ndarray,
    policy: NumpyPolicy,
    normalizer: Normalizer,
    noise: np.ndarray,
    first_acting: np.ndarray | None = None,
) -> Rollout:
    """`len(noise)` steps of `env` from its current raw `observations`, acting with `policy`: per step,
    normalise, act with that step's noise, value, step; the value of a truncated episode's final observation
    for bootstrapping. `first_acting` is what the first step acts on, if not `observations` normalised now.

    Each group of environments (`env.groups`: a worker process, an env server) runs through the rollout on
    its own: as soon as a group's step returns, the policy acts for it and sends it on while the other
    groups are still simulating, so that neither the policy nor the slowest group keeps the others waiting.
    A group's actions depend only on its own observations and its rows of `noise`, so the rollout is the
    same whatever the timing; the numbers depend on the grouping only through the rounding of the
    policy's matrix products, which differs with the number of rows they are computed on.
    """
    steps, n = noise.shape[:2]
    act_dim = noise.shape[2]
    raw = np.empty((steps + 1, n, *observations.shape[1:]), np.float32)
    raw[0] = observations
    actions, means = (np.empty((steps, n, act_dim), np.float32) for _ in range(2))
    log_probs, values, rewards = (np.empty((steps, n), np.float32) for _ in range(3))
    final_values = np.zeros((steps, n), np.float32)
    terminated, truncated = (np.empty((steps, n), bool) for _ in range(2))
    ended_steps: list[int] = []
    ended_envs: list[int] = []
    episode_returns: list[float] = []
    episode_lengths: list[int] = []
    groups = [slice(envs.start, envs.stop) for envs in env.groups]

    def act(t: int, group: int, acting: np.ndarray) -> None:
        rows = groups[group]
        actions[t, rows], log_probs[t, rows], means[t, rows] = policy.act(acting, noise[t, rows])
        values[t, rows] = policy.value_of(acting)
        env.send_step(group, actions[t, rows])

    first = normalizer.normalize(observations) if first_acting is None else first_acting
    for group, rows in enumerate(groups):
        act(0, group, first[rows])
    for t in range(steps):
        for group, rows in enumerate(groups):
            step = env.receive_step(group)
            raw[t + 1, rows], rewards[t, rows] = step.observations, step.rewards
            terminated[t, rows], truncated[t, rows] = step.terminated, step.truncated
            if step.truncated.any():
                final_values[t, rows][step.truncated] = policy.value_of(
                    normalizer.normalize(step.final_observations[step.truncated])
                )
            ended = (np.flatnonzero(step.terminated | step.truncated) + rows.start).tolist()
            ended_steps += [t] * len(ended)
            ended_envs += ended
            episode_returns += step.episode_returns
            episode_lengths += step.episode_lengths
            if t + 1 < steps:
                act(t + 1, group, normalizer.normalize(step.observations))
    return Rollout(
        observations=raw,
        actions=actions,
        log_probs=log_probs,
        means=means,
        values=values,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        final_values=final_values,
        last_values=policy.value_of(normalizer.normalize(raw[steps])),
        episode_steps=np.array(ended_steps, np.int64),
        episode_envs=np.array(ended_envs, np.int64),
        episode_returns=np.array(episode_returns, np.float64),
        episode_lengths=np.array(episode_lengths, np.int64),
        restarted=np.zeros(n, bool),
    )


# --- the trainer side ---------------------------------------------------------------------------------


def to_batch(
    rollout: Rollout,
    env: TrainingEnv,
    policy: NumpyPolicy,
    config: TrainerConfig,
    first_acting: np.ndarray | None = None,
) -> tuple[Batch, list[float], list[int]]:
    """The PPO batch, episode returns and lengths of a rollout; `first_acting` as given to `run`.

    Feeds `env`'s observation normaliser and reward scaler with the rollout, step by step in time order.
    """
    from agents_operator.trainer.loop import rollout_batch  # imports TensorFlow, which the server never needs

    steps = rollout.rewards.shape[0]
    if rollout.restarted.any():
        # The discarded episodes' discounted returns must not run on into the new ones.
        env.rewards.returns[rollout.restarted] = 0.0
        env.observations.observe(rollout.observations[0][rollout.restarted])
    for t in range(steps):
        env.observations.observe(rollout.observations[t + 1])
        env.rewards.track(rollout.rewards[t], rollout.terminated[t] | rollout.truncated[t])
    acting = env.observations.normalize(rollout.observations[:steps])
    if first_acting is not None:
        acting[0] = first_acting
    batch = rollout_batch(
        config,
        policy,
        acting,
        rollout.actions,
        rollout.log_probs,
        rollout.means,
        rollout.values,
        env.rewards.scale(rollout.rewards),
        rollout.terminated,
        rollout.truncated,
        rollout.final_values,
        rollout.last_values,
    )
    return batch, rollout.episode_returns.tolist(), rollout.episode_lengths.tolist()


class RolloutSampler:
    """A drop-in for `loop.Sampler` over a `TrainingEnv` of a `RemoteBatchEnv`: the servers collect whole
    rollouts (see the module docstring); the random generator is used exactly as `loop.Sampler` uses it."""

    def __init__(self, env: TrainingEnv, config: TrainerConfig, rng: np.random.Generator):
        self.env = env
        self.config = config
        self.rng = rng
        env.reset()

    def collect(self, policy: NumpyPolicy) -> tuple[Batch, list[float], list[int]]:
        """One rollout of `rollout_steps` x `num_envs` transitions and the episodes that ended in it."""
        shape = (self.config.rollout_steps, self.env.env.num_envs, policy.log_std.shape[0])
        noise = self.rng.standard_normal(shape, dtype=np.float32)
        rollout = self.env.env.collect(policy, self.env.observations, noise)
        return to_batch(rollout, self.env, policy, self.config)
