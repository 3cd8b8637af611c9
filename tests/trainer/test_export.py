"""The trainer's export (trainer/export.py): a SavedModel that acts bit for bit as the trainer evaluates, with
the signatures TensorFlow Serving sees, written by the chief at the end and by `agents-operator export`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from agents_operator import exported, presets, topology
from agents_operator.exported import policy as loader
from agents_operator.trainer import checkpoints, export, loop, playback, rundir
from agents_operator.trainer.envs.episodes import deterministic
from agents_operator.trainer.learner import Learner
from agents_operator.trainer.ppo.normalize import Moments, Normalizer
from agents_operator.trainer.ppo.policy import NumpyPolicy
from tests.trainer.cli import run


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


def test_a_state_dependent_policy_samples_with_the_std_of_each_state(tmp_path):
    """gSDE's std (config `exploration: state_dependent`): `sample` draws a ~ N(mean(s), std(s)^2) with the std
    the trainer's numpy actor has for s; the log-probabilities are that Gaussian's."""
    rng = np.random.default_rng(3)
    obs_dim, act_dim = 5, 2
    shapes = [(obs_dim, 16), (16, act_dim)]
    layers = [(rng.normal(0, 0.5, s).astype(np.float32), rng.normal(0, 0.1, s[1]).astype(np.float32)) for s in shapes]
    log_std = rng.normal(-1.0, 0.5, (16, act_dim)).astype(np.float32)
    value = [(rng.normal(size=(obs_dim, 1)).astype(np.float32), np.zeros(1, np.float32))]
    policy = NumpyPolicy(layers, log_std, value, "tanh")
    observations = Normalizer((obs_dim,), 10.0, False)
    low, high = np.full(act_dim, -1.0, np.float32), np.full(act_dim, 1.0, np.float32)
    export.write(tmp_path / "model", policy, observations, low, high, _metadata(obs_dim, act_dim))
    x = _observations(4000, obs_dim, seed=4)
    actions, log_probs = loader.load(tmp_path / "model").sample(x, seed=7)
    mean, want_log_std = policy.gaussian(x)
    noise = (actions - mean) * np.exp(-want_log_std)
    assert abs(noise.std() - 1.0) < 0.05 and abs(noise.mean()) < 0.05
    per_dim = -0.5 * np.square(noise) - want_log_std - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(log_probs, per_dim.sum(axis=1), rtol=1e-4, atol=1e-4)
    assert np.ptp(want_log_std) > 0.5  # the std does vary with the state
    np.testing.assert_array_equal(export.read(tmp_path / "model")[0].log_std, log_std)


def test_a_policy_that_evaluates_to_nan_is_not_exported_and_the_export_before_it_stays(trained, tmp_path):
    config, logdir = trained
    out = tmp_path / "exported"
    shutil.copytree(logdir / exported.DIRECTORY, out)
    before = (out / exported.METADATA).read_text()
    learner = Learner(config, 3, 1)
    try:
        state, checkpoint = checkpoints.restore_latest(learner, logdir)
    finally:
        learner.close()
    (kernel, bias), *rest = state.policy.policy
    nan = np.full_like(kernel, np.nan)
    broken = NumpyPolicy([(nan, bias), *rest], state.policy.log_std, state.policy.value, config.activation)
    refused = pytest.raises(exported.ExportError, match=r"ckpt-00000001 not exported: its evaluation returned \[nan")
    with playback.source(config.env_id, config.max_episode_steps, None, 1, render=False) as source, refused:
        export.export_state(out, config, dataclasses.replace(state, policy=broken), checkpoint, source, None, True)
    assert (out / exported.METADATA).read_text() == before
