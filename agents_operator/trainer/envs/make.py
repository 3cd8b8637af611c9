"""One gymnasium environment, as every batch and evaluation makes it: float32 observations, an optional time
limit, PyBullet's tasks registered on first use and their start-up chatter silenced; and the CPUs a batch may
spread its worker processes over."""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np


def make_env(env_id: str, max_episode_steps: int | None = None, render_mode: str | None = None) -> gym.Env:
    """One environment with float32 observations, optionally under a time limit.

    PyBullet tasks (ids containing "Bullet") are registered on first use and their start-up chatter is
    silenced. An id of the form "module:Name-v0" imports `module` first, which may register `Name-v0`.
    """
    bullet = "Bullet" in env_id
    if bullet:
        _register_pybullet_envs()
    # Environments that cannot render do not take a render_mode argument at all.
    options = {} if render_mode is None else {"render_mode": render_mode}
    env = gym.make(env_id, max_episode_steps=max_episode_steps, **options)
    if bullet:
        env = _QuietConnect(env)
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and space.dtype != np.float32:
        env = gym.wrappers.DtypeObservation(env, np.float32)
    return env


def usable_cpus() -> int:
    """CPUs this process may use: its affinity, bounded by a cgroup CPU quota (a Kubernetes CPU limit)."""
    cpus = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/cpu.max") as quota_file:
            quota, period = quota_file.read().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    return cpus


def _register_pybullet_envs() -> None:
    """Import PyBullet and its gymnasium registrations without the build banner it prints to stderr."""
    if "pybullet_envs_gymnasium" in sys.modules:
        return
    with _silenced(2):
        import pybullet  # noqa: F401
        import pybullet_envs_gymnasium  # noqa: F401


class _QuietConnect(gym.Wrapper):
    """Silences the `argv[0]=` lines PyBullet writes to stdout when the first reset connects it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._connected = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self._connected:
            return self.env.reset(**kwargs)
        with _silenced(1):
            result = self.env.reset(**kwargs)
        self._connected = True
        return result


@contextlib.contextmanager
def _silenced(fd: int) -> Iterator[None]:
    """Point a file descriptor at /dev/null for a while, so that C code printing to it goes nowhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(fd)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers what it writes to a pipe or file: drop it here.
        os.dup2(saved, fd)
        os.close(saved)
        os.close(null)
