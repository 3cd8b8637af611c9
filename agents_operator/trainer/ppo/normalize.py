"""Streaming observation normalisation and reward scaling.

Statistics are kept as additive sums (count, sum, sum of squares, float64). Sums merge by addition, so
the statistics a worker gathered during a rollout can be pushed to shared TensorFlow variables with one
`assign_add`, in any order and concurrently with other workers, without a read-modify-write race.

A `Normalizer` standardises with its `shared` statistics (as last read from the learner's variables);
what it observes meanwhile is pending until `take_pending` hands the rollout's sums over to be pushed.
How a rollout acts (`acting`, config `observation_statistics`):
- "rollout": with the shared statistics, fixed for the whole rollout. Acting costs a subtraction, a
  division and a clip per step, and all workers normalise alike between two updates; the first rollout of
  a run has no statistics yet and passes observations through unchanged.
- "step": with statistics that each acting process also updates with every step's observations of its
  own environments (`advance`), as SB3's VecNormalize and BatchPPO's filters do: the first rollout is
  normalised from its first step, from the statistics of the environments' first observations on. The
  moments are recomputed per step; the sums still reach the shared statistics once per rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_EPSILON = 1e-8


@dataclass
class Moments:
    """Additive sufficient statistics of a stream of arrays of one shape."""

    count: float = 0.0
    sum: np.ndarray = field(default_factory=lambda: np.zeros(()))
    sumsq: np.ndarray = field(default_factory=lambda: np.zeros(()))

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> Moments:
        return cls(0.0, np.zeros(shape), np.zeros(shape))

    @classmethod
    def of(cls, batch: np.ndarray) -> Moments:
        """Moments of `batch`, whose first axis is the sample axis."""
        batch = np.asarray(batch, dtype=np.float64)
        return cls(float(len(batch)), batch.sum(axis=0), np.square(batch).sum(axis=0))

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.count + other.count, self.sum + other.sum, self.sumsq + other.sumsq)

    @property
    def mean(self) -> np.ndarray:
        return self.sum / self.count if self.count else np.zeros_like(self.sum)

    @property
    def var(self) -> np.ndarray:
        """Population variance; 1 before any data so that normalising is the identity."""
        if not self.count:
            return np.ones_like(self.sum)
        return np.maximum(self.sumsq / self.count - np.square(self.mean), 0.0)


class Normalizer:
    """Standardise arrays with the shared statistics and clip the result to +-clip."""

    def __init__(self, shape: tuple[int, ...], clip: float, enabled: bool = True, per_step: bool = False):
        self.shape = shape
        self.clip = clip
        self.enabled = enabled
        self.per_step = per_step
        self._observed: list[np.ndarray] = []
        self.shared = Moments.zeros(shape)

    @property
    def shared(self) -> Moments:
        return self._shared

    @shared.setter
    def shared(self, moments: Moments) -> None:
        self._shared = moments
        self.mean = moments.mean.astype(np.float32)
        self.std = np.sqrt(moments.var + _EPSILON).astype(np.float32)

    def observe(self, batch: np.ndarray) -> None:
        """Count `batch` (first axis: samples) in the next push; the caller must not modify it afterwards."""
        self._observed.append(batch)

    @property
    def pending(self) -> Moments:
        """The sums of everything observed since the last `take_pending`."""
        return Moments.of(np.concatenate(self._observed)) if self._observed else Moments.zeros(self.shape)

    def take_pending(self) -> Moments:
        """The sums of everything observed since the last call, now also counted in `shared`.

        The caller pushes them to the shared variables and may then replace `shared` with what it reads
        back, which includes the sums of every other worker.
        """
        pending = self.pending
        self._observed = []
        self.shared = self._shared + pending
        return pending

    @property
    def acting_moments(self) -> Moments:
        """The statistics a rollout starting now acts with: the shared ones, and per step what is pending too
        (a run's first observations, counted before its first rollout)."""
        return self._shared + self.pending if self.per_step else self._shared

    def snapshot(self) -> Normalizer:
        """A normaliser with the `acting_moments` as its shared statistics that observes nothing of its own:
        what one process's part of a rollout acts with (`envs.rollout.run`), and what a rollout collected
        while this one moves on starts from (`sampling.overlapped`)."""
        copy = Normalizer(self.shape, self.clip, self.enabled, self.per_step)
        copy.shared = self.acting_moments
        return copy

    def advance(self, batch: np.ndarray) -> None:
        """Per step, count a step's observations (first axis: environments) in the statistics acted with from
        the next step on; fixed per rollout, nothing. For a `snapshot`: its sums are never pushed."""
        if self.per_step:
            self.shared = self._shared + Moments.of(batch)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return np.asarray(x, dtype=np.float32)
        return np.clip((x - self.mean) / self.std, -self.clip, self.clip, dtype=np.float32)


class RewardScaler:
    """Divide rewards by the standard deviation of the discounted return (not of the reward).

    This is the reward normalisation of the PPO baselines: it keeps the scale of the value targets near
    one without moving the optimum (no mean is subtracted). Rewards affect only the update, never how
    the policy acts, so a rollout's rewards are scaled after it, with statistics that include it: the
    first update of a run sees rewards on the same scale as every later one. The per-environment running
    returns restart at every episode end; they are not checkpointed (a resumed run restarts its episodes).
    """

    def __init__(self, num_envs: int, discount: float, clip: float, enabled: bool = True):
        self.discount = discount
        self.returns = np.zeros(num_envs)
        self.statistics = Normalizer((), clip, enabled)

    def track(self, rewards: np.ndarray, done: np.ndarray) -> None:
        """Count one step's rewards (raw) into the discounted returns."""
        returns = self.returns * self.discount + rewards
        self.statistics.observe(returns)
        self.returns = np.where(done, 0.0, returns)

    def scale(self, rewards: np.ndarray) -> np.ndarray:
        """`rewards` divided by the std of the returns in the shared statistics and those tracked since."""
        if not self.statistics.enabled:
            return np.asarray(rewards, dtype=np.float32)
        std = np.sqrt((self.statistics.shared + self.statistics.pending).var + _EPSILON)
        return np.clip(rewards / std, -self.statistics.clip, self.statistics.clip, dtype=np.float32)
