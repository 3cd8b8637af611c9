"""One environment (envs/make.py): PyBullet kept quiet, float32 observations, the time limit."""

from __future__ import annotations

import numpy as np
import pytest

from agents_operator.trainer.envs.make import make_env


def test_make_env_silences_pybullet(capfd: pytest.CaptureFixture[str]) -> None:
    env = make_env("InvertedPendulumBulletEnv-v0", max_episode_steps=5)
    observation, _ = env.reset(seed=0)
    env.close()
    out, err = capfd.readouterr()
    assert "argv[0]" not in out and "pybullet build time" not in err
    assert observation.dtype == np.float32 and env.spec.max_episode_steps == 5
