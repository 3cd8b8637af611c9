"""Playing a policy (trainer/playback.py), the run's or an exported one: `evaluate` plays the same episodes with
both, and an env server plays and collects with an exported policy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents_operator import exported, topology
from agents_operator.exported import policy as loader
from tests.trainer.cli import run
from tests.trainer.envserver.servers import serving


def test_evaluate_plays_the_same_episodes_with_the_export_and_the_run(trained, capsys):
    config, logdir = trained
    assert run("evaluate", "--logdir", logdir, "--episodes", "2") == 0
    of_run = json.loads(capsys.readouterr().out)
    assert run("evaluate", "--model", logdir / exported.DIRECTORY, "--episodes", "2") == 0
    of_model = json.loads(capsys.readouterr().out)
    assert (
        of_run["returns"]
        == of_model["returns"]
        == exported.read_metadata(logdir / exported.DIRECTORY).evaluation.returns
    )
    assert (of_run["policy"], of_model["seed"], of_model["lengths"]) == (
        "ckpt-00000001",
        config.seed + topology.EVALUATION_SEED_OFFSET,
        [40, 40],
    )
    assert of_model["mean"] == pytest.approx(np.mean(of_model["returns"]))
    assert of_model["std"] == pytest.approx(np.std(of_model["returns"]))


def test_an_env_server_plays_and_collects_with_an_exported_policy(trained, tmp_path, capsys):
    config, logdir = trained
    model = logdir / exported.DIRECTORY
    with serving(config.env_id, 2, max_episode_steps=40) as address:
        assert run("evaluate", "--model", model, "--episodes", "2", "--env-server", address) == 0
        assert json.loads(capsys.readouterr().out)["returns"] == exported.read_metadata(model).evaluation.returns
        assert (
            run("collect", "--model", model, "--env-server", address, "--steps", "50", "--out", tmp_path / "t.npz") == 0
        )
    assert "wrote" in capsys.readouterr().out
    trajectories = np.load(tmp_path / "t.npz")
    assert trajectories["actions"].shape == (50, 2, 1) and trajectories["observations"].shape == (51, 2, 3)
    assert list(trajectories["episode_lengths"]) == [40, 40]
    policy = loader.load(model)
    # The server sampled with the exported policy: its Gaussian means (float32, as in training) are act's.
    means, acts = np.clip(trajectories["means"], -2, 2), policy(trajectories["observations"][:-1].reshape(-1, 3))
    np.testing.assert_allclose(means.reshape(-1, 1), acts, rtol=1e-5, atol=1e-7)
