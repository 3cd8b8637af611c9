"""The memory a `BatchEnv` shares with its worker processes: where each array lives, computed alike on both
sides, and views of one group's rows."""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass

import numpy as np

from agents_operator.trainer.envs.types import StepResult

POLL_SECONDS = 0.5
"""How often a waiting side (the batch or a worker process) wakes up to check that its peer is still alive."""


@dataclass(frozen=True)
class Layout:
    """Where each array of the batch lives in the shared buffer; both sides compute the same offsets."""

    num_envs: int
    observation_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    action_dtype: str

    def _fields(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        observations = (self.num_envs, *self.observation_shape)
        return [
            ("actions", (self.num_envs, *self.action_shape), np.dtype(self.action_dtype)),
            ("observations", observations, np.dtype(np.float32)),
            ("final_observations", observations, np.dtype(np.float32)),
            ("rewards", (self.num_envs,), np.dtype(np.float32)),
            ("terminated", (self.num_envs,), np.dtype(bool)),
            ("truncated", (self.num_envs,), np.dtype(bool)),
        ]

    @property
    def nbytes(self) -> int:
        return sum(aligned(math.prod(shape) * dtype.itemsize) for _, shape, dtype in self._fields())

    def arrays(self, memory: mmap.mmap) -> SharedArrays:
        arrays, offset = {}, 0
        for name, shape, dtype in self._fields():
            arrays[name] = np.ndarray(shape, dtype, buffer=memory, offset=offset)
            offset += aligned(arrays[name].nbytes)
        return SharedArrays(**arrays)


@dataclass
class SharedArrays:
    actions: np.ndarray
    observations: np.ndarray
    final_observations: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    def rows(self, start: int, stop: int) -> SharedArrays:
        return SharedArrays(
            **{name: array[start:stop] for name, array in vars(self).items()}  # views, not copies
        )

    def result(self, episode_returns: list[float], episode_lengths: list[int]) -> StepResult:
        """The step these rows hold, copied out."""
        return StepResult(
            observations=self.observations.copy(),
            rewards=self.rewards.copy(),
            terminated=self.terminated.copy(),
            truncated=self.truncated.copy(),
            final_observations=self.final_observations.copy(),
            episode_returns=episode_returns,
            episode_lengths=episode_lengths,
        )


def aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64
