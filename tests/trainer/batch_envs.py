"""Small environments for the BatchEnv tests, and how to watch the worker processes that step them.

Worker processes import this module (through "<module>:Name-v0" ids) to find the environments registered below,
so it must stay importable without pytest."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

from agents_operator.trainer.envs.batch import BatchEnv


class EchoEnv(gym.Env):
    """Observes the action it received and facts about its process: [a0, a1, tf loaded, 1 thread, pid]."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float64)
    action_space = gym.spaces.Box(-0.5, 0.5, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._observe(np.zeros(2)), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self._observe(action), 0.0, False, False, {}

    def _observe(self, action: np.ndarray) -> np.ndarray:
        single_threaded = os.environ.get("OMP_NUM_THREADS") == "1"
        return np.array([*action, "tensorflow" in sys.modules, single_threaded, os.getpid()], np.float64)


class RaisingEnv(EchoEnv):
    """Raises on its third step."""

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.steps = 0
        return super().reset(seed=seed)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps == 3:
            raise ZeroDivisionError("the test environment fails on purpose")
        return super().step(action)


class SlowEnv(EchoEnv):
    """Takes `STEP_SECONDS` a step, as a simulator would."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(STEP_SECONDS)
        return super().step(action)


STEP_SECONDS = 0.004

gym.register("BatchEnvTestEcho-v0", entry_point=f"{__name__}:EchoEnv")
gym.register("BatchEnvTestSlow-v0", entry_point=f"{__name__}:SlowEnv")
gym.register("BatchEnvTestRaising-v0", entry_point=f"{__name__}:RaisingEnv")
ECHO = f"{__name__}:BatchEnvTestEcho-v0"
SLOW = f"{__name__}:BatchEnvTestSlow-v0"
RAISING = f"{__name__}:BatchEnvTestRaising-v0"
PID = 4  # column of EchoEnv's observation holding the worker's pid (exact in float32 below 2**24)


def worker_pids(env: BatchEnv) -> set[int]:
    return {int(pid) for pid in env.reset()[:, PID]}


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_until_gone(pids: set[int], seconds: float = 5.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while (survivors := {pid for pid in pids if alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return survivors
