"""Small environments for the env-server tests, importable by env-server and BatchEnv worker processes
(through "tests.trainer.envserver_envs:Name-v0" ids) without pytest."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class RaisingEnv(gym.Env):
    """Observes its step count; raises on its third step."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps == 3:
            raise ZeroDivisionError("the test environment fails on purpose")
        return np.full(1, self.steps, np.float32), 1.0, False, False, {}


gym.register("EnvServerTestRaising-v0", entry_point=f"{__name__}:RaisingEnv")
RAISING = f"{__name__}:EnvServerTestRaising-v0"
