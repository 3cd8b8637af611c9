"""What every batch of environments shares, wherever its environments run: the result of a step, the error of
an environment that failed in its worker process, and the checks a batch makes before it talks to its workers
(`batch.BatchEnv`) or servers (`envserver.client.RemoteBatchEnv`)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


class EnvProcessError(RuntimeError):
    """An environment raised in its worker process, or the worker process died."""


@dataclass
class StepResult:
    """One step of every environment of the batch."""

    observations: np.ndarray
    """(num_envs, *obs_shape) float32: the next observation; the first one of the next episode where an
    episode just ended (workers reset finished environments themselves)."""
    rewards: np.ndarray
    """(num_envs,) float32."""
    terminated: np.ndarray
    """(num_envs,) bool: the episode reached a terminal state."""
    truncated: np.ndarray
    """(num_envs,) bool: the episode hit its time limit."""
    final_observations: np.ndarray
    """(num_envs, *obs_shape) float32: the last observation of the episode where it just ended (to bootstrap
    truncated episodes from), else equal to `observations`."""
    episode_returns: list[float]
    """Undiscounted returns (raw rewards) of the episodes that ended in this step, in environment order."""
    episode_lengths: list[int]
    """Lengths of those episodes."""

    @classmethod
    def concatenate(cls, parts: list[StepResult]) -> StepResult:
        """The step results of consecutive groups of environments as one."""
        merged = {}
        for item in dataclasses.fields(cls):
            values = [getattr(part, item.name) for part in parts]
            merged[item.name] = (
                list(itertools.chain(*values)) if isinstance(values[0], list) else np.concatenate(values)
            )
        return cls(**merged)


class BatchChecks:
    """What `BatchEnv` and `RemoteBatchEnv` check alike before they talk to their workers or
    servers: the batch is still usable (no failure yet), was reset, and actions have the shape of the rows."""

    env_id: str
    action_shape: tuple[int, ...]
    _failure: str | None
    _was_reset: bool

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"{self.env_id} {type(self).__name__} is unusable: {self._failure}")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Refuse to talk to the workers or servers once the batch is unusable; make it unusable when an
        exchange fails (whatever interrupts one leaves replies in flight)."""
        self._check_usable()
        try:
            yield
        except BaseException as error:
            self._failure = f"an earlier call failed with {type(error).__name__}"
            raise

    def _check_actions(self, actions: np.ndarray, rows: int) -> None:
        self._check_usable()
        if not self._was_reset:
            raise RuntimeError(f"{self.env_id} {type(self).__name__}: call reset() before step()")
        expected = (rows, *self.action_shape)
        if np.shape(actions) != expected:
            raise ValueError(f"actions must have shape {expected}, got {np.shape(actions)}")
