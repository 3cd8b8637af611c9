"""The exported policy's loader (exported/policy.py): TensorFlow and numpy only; it scores the trainer's
returns on the same seeds and samples from its seed with the Gaussian's log-probability."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from agents_operator import exported
from agents_operator.exported import policy as loader
from agents_operator.trainer import export
from agents_operator.trainer.envs.episodes import play
from agents_operator.trainer.envs.make import make_env


def _observations(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Raw observations on several scales: some normalise beyond the clip."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, dim)) * rng.choice([0.1, 1.0, 30.0], size=(n, 1))).astype(np.float32)


def test_the_loaded_policy_scores_the_trainers_returns_on_the_same_seeds(trained):
    config, logdir = trained
    metadata = exported.read_metadata(logdir / exported.DIRECTORY)
    policy = loader.load(logdir / exported.DIRECTORY)
    env = make_env(config.env_id, config.max_episode_steps)
    try:
        returns, _ = play(env, policy, 2, metadata.evaluation.seed)
    finally:
        env.close()
    assert returns == metadata.evaluation.returns  # floats compared exactly


def test_sample_draws_from_the_seed_with_the_gaussians_log_probability(trained):
    _, logdir = trained
    policy = loader.load(logdir / exported.DIRECTORY)
    numpy_policy, observations, _ = export.read(logdir / exported.DIRECTORY)
    x = _observations(2000, 3)
    actions, log_probs = policy.sample(x, seed=7)
    again, _ = policy.sample(x, seed=7)
    other, _ = policy.sample(x, seed=8)
    np.testing.assert_array_equal(actions, again)
    assert not np.array_equal(actions, other)
    mean = numpy_policy.mean(observations.normalize(x))
    noise = (actions - mean) / np.exp(numpy_policy.log_std)
    assert abs(noise.mean()) < 0.1 and abs(noise.std() - 1) < 0.1  # standard normal noise
    np.testing.assert_allclose(
        log_probs, -0.5 * noise[:, 0] ** 2 - numpy_policy.log_std[0] - 0.5 * np.log(2 * np.pi), rtol=1e-4, atol=1e-4
    )
    one, one_log_prob = policy.sample(x[0], seed=7)
    assert one.shape == (1,) and one_log_prob.shape == ()


def test_the_loader_imports_no_trainer_no_gymnasium_no_simulator(trained):
    _, logdir = trained
    code = (
        "import sys; from agents_operator.exported import policy; "
        f"print(policy.load({str(logdir / exported.DIRECTORY)!r})([0.5, -0.5, 1.0]).tolist()); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'gymnasium', 'gym', 'pybullet'})); "
        "print(sorted(m for m in sys.modules if m.startswith('agents_operator.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(json.loads(out[0])) == 1
    assert out[1] == "[]"
    assert out[2] == "['agents_operator.exported', 'agents_operator.exported.policy', 'agents_operator.tflogs']"


def test_observations_of_another_shape_are_refused(trained):
    _, logdir = trained
    policy = loader.load(logdir / exported.DIRECTORY)
    assert policy([0.5, -0.5, 1.0]).shape == (1,) and policy(np.zeros((4, 3))).shape == (4, 1)
    with pytest.raises(ValueError, match=r"observations of shape \(2,\): expected \[3\] or a batch"):
        policy([0.5, -0.5])


def test_a_run_directory_is_no_export(trained):
    _, logdir = trained
    with pytest.raises(loader.ExportError, match=r"not an exported policy \(no saved_model.pb\)"):
        loader.load(logdir)
