"""A run trained with its environments on an env server, in a process that cannot make environments: its
settings, and how the process is kept from making any (the fixture `remote_run` is tests/trainer/conftest.py's)."""

from __future__ import annotations

import gymnasium
import pytest

from agents_operator.trainer import loop

TINY = {
    "envs_per_worker": 2,
    "rollout_steps": 64,
    "minibatches": 4,
    "epochs": 2,
    "eval_every": 2,
    "eval_episodes": 2,
    "checkpoint_every": 2,
    "max_episode_steps": 50,
    "total_steps": 512,
    "metrics_port": 0,
}


def no_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process unable to make an environment: every local one goes through gymnasium.make, or
    through a BatchEnv whose subprocesses would make theirs."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trainer process made an environment")

    monkeypatch.setattr(gymnasium, "make", refuse)
    monkeypatch.setattr(loop, "BatchEnv", refuse)  # where the trainer looks it up
