"""The exported policy: a SavedModel that acts bit for bit as the trainer evaluates, loaded without the trainer."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents_operator import exported, presets, topology
from agents_operator.exported import policy as loader
from agents_operator.trainer import checkpoints, export, loop, playback, rundir
from agents_operator.trainer.envs.episodes import deterministic, play
from agents_operator.trainer.envs.make import make_env
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy

from .cli import run
from .test_envserver import serving

TINY = {
    "envs_per_worker": 2,
    "envs_per_process": 2,
    "rollout_steps": 64,
    "minibatches": 4,
    "epochs": 2,
    "eval_every": 0,
    "eval_episodes": 2,
    "max_episode_steps": 40,
    "total_steps": 128,
    "metrics_port": 0,
    "video_episodes": 0,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of one iteration, which the chief ends by exporting its policy to exported/."""
    logdir = tmp_path_factory.mktemp("export") / "run"
    config = presets.resolve("pendulum", TINY)
    loop.train(config, logdir, preset="pendulum")
    return config, logdir


def _observations(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Raw observations on several scales: some normalise beyond the clip."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, dim)) * rng.choice([0.1, 1.0, 30.0], size=(n, 1))).astype(np.float32)


def test_the_chief_exports_its_final_policy_with_its_metadata(trained):
    config, logdir = trained
    metadata = exported.read_metadata(logdir / exported.DIRECTORY)
    assert (metadata.env_id, metadata.max_episode_steps, metadata.preset) == ("Pendulum-v1", 40, "pendulum")
    assert (metadata.observation_shape, metadata.action_shape) == ([3], [1])
    assert (metadata.action_low, metadata.action_high) == ([-2.0], [2.0])
    assert (metadata.checkpoint, metadata.global_step, metadata.env_steps) == ("ckpt-00000001", 1, 128)
    evaluation = metadata.evaluation
    assert (evaluation.episodes, evaluation.seed) == (2, config.seed + topology.EVALUATION_SEED_OFFSET)
    assert evaluation.mean_return == pytest.approx(np.mean(evaluation.returns))
    assert rundir.load_preset(logdir) == "pendulum"


def test_the_loaded_policy_acts_bit_for_bit_as_the_trainer_evaluates(trained):
    config, logdir = trained
    with playback.of_run(config, logdir, None) as player:  # the trainer's own restore, as in evaluations
        low, high = player.source.action_low, player.source.action_high
        trainer = deterministic(player.policy, player.observations, low, high)
    policy = loader.load(logdir / exported.DIRECTORY)
    observations = _observations(5000, 3)
    want = np.stack([trainer(obs) for obs in observations])
    assert len(np.unique(want)) > 1000
    np.testing.assert_array_equal(policy(observations), want)  # a batch, exactly
    np.testing.assert_array_equal(np.stack([policy(obs) for obs in observations[:300]]), want[:300])  # one by one


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


@pytest.mark.parametrize(("activation", "normalize"), [("tanh", True), ("relu", True), ("tanh", False)])
def test_a_cheetah_sized_policy_exports_bit_for_bit(tmp_path, activation, normalize):
    """The `cheetah` preset's networks (26 -> 256 -> 256 -> 6) with random weights and statistics."""
    rng = np.random.default_rng(1)
    obs_dim, act_dim = 26, 6

    def layers(sizes):
        pairs = itertools.pairwise(sizes)
        return [
            (rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32), rng.normal(0, 0.1, b).astype(np.float32))
            for a, b in pairs
        ]

    policy = NumpyPolicy(
        layers([obs_dim, 256, 256, act_dim]),
        np.full(act_dim, -0.5, np.float32),
        layers([obs_dim, 256, 256, 1]),
        activation,
    )
    observations = Normalizer((obs_dim,), 10.0, normalize)
    observations.shared = Moments(1000.0, rng.normal(size=obs_dim) * 1000, rng.uniform(1, 5, obs_dim) * 1000)
    low, high = np.full(act_dim, -1.0, np.float32), np.full(act_dim, 1.0, np.float32)
    export.write(tmp_path / "model", policy, observations, low, high, _metadata(obs_dim, act_dim))
    x = _observations(4000, obs_dim, seed=2) + observations.mean
    trainer = deterministic(policy, observations, low, high)
    want = np.stack([trainer(obs) for obs in x])
    assert 0.05 < np.mean(np.abs(want) == 1.0) < 0.95  # many actions clipped, many not
    np.testing.assert_array_equal(loader.load(tmp_path / "model")(x), want)


def _metadata(obs_dim: int, act_dim: int) -> exported.Metadata:
    return exported.Metadata(
        env_id="Test-v0",
        max_episode_steps=None,
        observation_shape=[obs_dim],
        action_shape=[act_dim],
        action_low=[-1.0] * act_dim,
        action_high=[1.0] * act_dim,
        preset=None,
        checkpoint="ckpt-00000001",
        global_step=1,
        env_steps=1,
        evaluation=None,
    )


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


def test_the_signatures_are_what_tensorflow_serving_sees(trained):
    """What `saved_model_cli show --all` lists: the signature names, their inputs and outputs."""
    _, logdir = trained
    signatures = tf.saved_model.load(str(logdir / exported.DIRECTORY)).signatures
    assert set(signatures) == {exported.ACT, exported.SAMPLE}
    act, sample = signatures[exported.ACT], signatures[exported.SAMPLE]
    assert act.structured_input_signature[1] == {"observations": tf.TensorSpec([None, 3], tf.float32, "observations")}
    assert sample.structured_input_signature[1] == {
        "observations": tf.TensorSpec([None, 3], tf.float32, "observations"),
        "seed": tf.TensorSpec([], tf.int64, "seed"),
    }
    assert act.structured_outputs == {"actions": tf.TensorSpec([None, 1], tf.float32, "actions")}
    assert set(sample.structured_outputs) == {"actions", "log_probs"}


def test_read_gives_back_the_trainers_numpy_actor(trained):
    config, logdir = trained
    numpy_policy, observations, _ = export.read(logdir / exported.DIRECTORY)
    with playback.of_run(config, logdir, None) as player:
        want = player
    for got, expected in zip(
        numpy_policy.policy + numpy_policy.value, want.policy.policy + want.policy.value, strict=True
    ):
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(numpy_policy.log_std, want.policy.log_std)
    np.testing.assert_array_equal(observations.mean, want.observations.mean)
    np.testing.assert_array_equal(observations.std, want.observations.std)
    assert (observations.clip, observations.enabled) == (config.clip_observations, config.normalize_observations)


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
    assert out[2] == "['agents_operator.exported', 'agents_operator.exported.policy']"


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


def test_export_command_writes_a_checkpoint_and_refuses_to_overwrite(trained, tmp_path, capsys):
    _, logdir = trained
    out = tmp_path / "model"
    assert run("export", "--logdir", logdir, "--checkpoint", "1", "--out", out) == 0
    assert "wrote" in capsys.readouterr().out
    metadata = exported.read_metadata(out)
    assert (metadata.checkpoint, metadata.preset) == ("ckpt-00000001", "pendulum")
    before = (out / exported.SAVED_MODEL).stat().st_mtime_ns
    assert run("export", "--logdir", logdir, "--out", out) == 2
    assert "already exists; pass --replace" in capsys.readouterr().err
    assert (out / exported.SAVED_MODEL).stat().st_mtime_ns == before
    assert run("export", "--logdir", logdir, "--out", out, "--replace") == 0
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary directory left


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["export", "--logdir", "{run}", "--checkpoint", "9", "--out", "{tmp}/m"],
            "--checkpoint 9: no such checkpoint in",
        ),
        (["export", "--logdir", "{tmp}/none", "--out", "{tmp}/m"], "no run in {tmp}/none (no config.yaml)"),
        (["export", "--logdir", "{empty}", "--out", "{tmp}/m"], "no checkpoint in {empty}/checkpoints"),
        (["evaluate", "--model", "{run}", "--episodes", "1"], "{run}: not an exported policy (no saved_model.pb)"),
        (["evaluate", "--model", "{tmp}/none"], "{tmp}/none: no such directory"),
        (
            ["visualize", "--model", "{bad}", "--out", "{tmp}/a.gif"],
            "{bad}/policy.json: format 7; this version reads format 1",
        ),
        (
            ["collect", "--model", "{run}/exported", "--env-server", "x:1", "--out", "{tmp}/t.txt"],
            "the file name must end in .npz",
        ),
    ],
)
def test_bad_input_is_one_line(trained, tmp_path, capsys, argv, expected):
    _, logdir = trained
    empty = tmp_path / "empty"
    rundir.write_config(empty, presets.resolve("pendulum"))
    bad = tmp_path / "bad"
    shutil.copytree(logdir / exported.DIRECTORY, bad)
    (bad / exported.METADATA).write_text(json.dumps({"format": 7}))
    paths = {"run": logdir, "tmp": tmp_path, "empty": empty, "bad": bad}
    assert run(*[arg.format(**paths) for arg in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert expected.format(**paths) in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "m").exists()


def test_a_run_with_export_off_writes_none(trained, tmp_path):
    config, logdir = trained
    copy = tmp_path / "run"
    shutil.copytree(logdir, copy, ignore=shutil.ignore_patterns(exported.DIRECTORY))
    loop.train(config.model_copy(update={"export": False}), copy)  # a finished run: only its end again
    assert not (copy / exported.DIRECTORY).exists()
    assert [p.name for p in checkpoints.list_checkpoints(copy)] == ["ckpt-00000001"]
