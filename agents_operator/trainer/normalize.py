"""Streaming observation normalisation and reward scaling.

Statistics are kept as additive sums (count, sum, sum of squares, float64). Sums merge by addition, so
the statistics a worker gathered during a rollout can be pushed to shared TensorFlow variables with one
`assign_add`, in any order and concurrently with other workers, without a read-modify-write race. Each
`Normalizer` therefore holds two parts: the `shared` sums (as last read from the learner's variables) and
the `pending` sums of this worker that have not been pushed yet; it normalises with both.
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
    """Standardise arrays with running statistics and clip the result to +-clip."""

    def __init__(self, shape: tuple[int, ...], clip: float, enabled: bool = True):
        self.shape = shape
        self.clip = clip
        self.enabled = enabled
        self.shared = Moments.zeros(shape)
        self.pending = Moments.zeros(shape)

    def observe(self, batch: np.ndarray) -> None:
        self.pending = self.pending + Moments.of(batch)

    def take_pending(self) -> Moments:
        """The sums gathered since the last call, now counted as shared.

        The caller pushes them to the shared variables and may then replace `shared` with what it reads
        back, which includes the sums of every other worker.
        """
        pending, self.pending = self.pending, Moments.zeros(self.shape)
        self.shared = self.shared + pending
        return pending

    @property
    def moments(self) -> Moments:
        return self.shared + self.pending

    def normalize(self, x: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return np.asarray(x, dtype=np.float32)
        moments = self.moments
        scaled = (x - moments.mean) / np.sqrt(moments.var + _EPSILON)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)


class RewardScaler:
    """Divide rewards by the standard deviation of the discounted return (not of the reward).

    This is the reward normalisation of the PPO baselines: it keeps the scale of the value targets near
    one without moving the optimum (no mean is subtracted). The per-environment running returns restart
    at every episode end; they are not checkpointed (a resumed run restarts its episodes anyway).
    """

    def __init__(self, num_envs: int, discount: float, clip: float, enabled: bool = True):
        self.discount = discount
        self.returns = np.zeros(num_envs)
        self.statistics = Normalizer((), clip, enabled)

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.discount + rewards
        self.statistics.observe(self.returns)
        self.returns[done] = 0.0
        if not self.statistics.enabled:
            return np.asarray(rewards, dtype=np.float32)
        scaled = rewards / np.sqrt(self.statistics.moments.var + _EPSILON)
        return np.clip(scaled, -self.statistics.clip, self.statistics.clip).astype(np.float32)
