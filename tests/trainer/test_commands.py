"""The trainer's sub-commands (trainer/commands.py): a run trained, resumed, plotted and visualized through
them; mistakes on the command line one line on stderr with exit code 2, before anything heavy starts."""

import socket

import pytest
import yaml

from agents_operator import presets
from agents_operator.trainer import checkpoints, commands, rundir
from agents_operator.trainer.summaries import read_scalars
from tests.trainer.cli import run, usage_error


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--config", "nope"], "agents-operator train: error: unknown preset 'nope' (known: ant, cheetah,"),
        (["--config", "pendulum", "--set", "learning_rat=0.1"], "--set learning_rat: unknown setting (did you mean"),
        (["--config", "pendulum", "--set", "epochs"], "--set 'epochs': expected KEY=VALUE"),
        (["--config", "pendulum", "--set", "epochs=many"], "epochs: Input should be a valid integer"),
        (["--config", "pendulum", "--set", "learning_rate=-1"], "learning_rate: Input should be greater than 0"),
        (["--config", "pendulum", "--set", "policy_layers=[64, 0]"], "policy_layers.1: Input should be greater"),
        (["--config", "pendulum", "--set", "minibatches=7"], "minibatches (7) must divide"),
        (["--config", "pendulum", "--set", "exploration_hold=4"], "exploration_hold (4) holds gSDE's exploration"),
        (["--config", "pendulum", "--set", "epochs=[1"], "--set epochs: '[1' is not a YAML value"),
        ([], "--config PRESET is required to start a run"),
        (["--config", "pendulum", "--set", "env_id=Nope-v0"], "env_id 'Nope-v0': Environment `Nope` doesn't exist"),
    ],
)
def test_train_usage_errors(capsys, tmp_path, argv, expected):
    assert expected in usage_error(capsys, "train", "--logdir", tmp_path / "run", *argv)
    assert not (tmp_path / "run").exists()


def test_settings_are_yaml_and_accept_camel_case():
    settings = commands.parse_overrides(["policy_layers=[128,128]", "maxGradNorm=null", "env_id=Pendulum-v1"])
    assert settings == {"policy_layers": [128, 128], "max_grad_norm": None, "env_id": "Pendulum-v1"}
    config = presets.resolve("pendulum", settings)
    assert config.policy_layers == [128, 128]
    assert config.max_grad_norm is None


def test_existing_run_needs_resume_and_resume_rejects_conflicting_settings(capsys, tmp_path):
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    assert "already holds a run: pass --resume" in usage_error(
        capsys, "train", "--config", "pendulum", "--logdir", tmp_path
    )
    err = usage_error(
        capsys, "train", "--resume", "--logdir", tmp_path, "--set", "learning_rate=0.5", "--set", "seed=3"
    )
    assert "seed (saved 0, given 3); learning_rate (saved 0.001, given 0.5)" in err
    err = usage_error(capsys, "train", "--resume", "--config", "cheetah", "--logdir", tmp_path)
    assert "env_id (saved Pendulum-v1, given HalfCheetahBulletEnv-v0)" in err


def test_resume_uses_the_saved_config_and_may_change_the_budget(tmp_path):
    saved = presets.resolve("pendulum", {"learning_rate": 0.01})
    rundir.write_config(tmp_path, saved)
    config = commands.resolve_train_config(None, ["total_steps=5000"], tmp_path, resume=True)
    assert config == saved.model_copy(update={"total_steps": 5000})
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["learning_rate"] == 0.01


@pytest.mark.parametrize(
    "setting", ["video_episodes=0", "eval_every=3", "eval_episodes=2", "metrics_port=0", "threads=2", "total_steps=9"]
)
def test_resume_accepts_settings_that_do_not_change_learning(tmp_path, setting):
    """`local --no-video` on an existing run gives video_episodes=0: a resume must not refuse it."""
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    key, value = setting.split("=")
    config = commands.resolve_train_config(None, [setting], tmp_path, resume=True)
    assert getattr(config, key) == int(value)


@pytest.mark.parametrize("setting", ["seed=3", "learning_rate=0.5", "epochs=3", "mode=async", "discount=0.5"])
def test_resume_refuses_settings_that_change_learning_and_names_them(capsys, tmp_path, setting):
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    err = usage_error(capsys, "train", "--resume", "--logdir", tmp_path, "--set", setting)
    assert f"settings differ from the run's config.yaml: {setting.split('=')[0]} (saved " in err


def test_visualize_and_plot_usage_errors(capsys, tmp_path):
    assert "no run in" in usage_error(capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.gif")
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    assert "no checkpoint in" in usage_error(capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.gif")
    assert "must end in .gif or .mp4" in usage_error(
        capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.png"
    )
    assert "no summaries in" in usage_error(capsys, "plot", "--logdir", tmp_path, "--out", tmp_path / "c.png")


# --- end to end through the commands: train, resume, checkpoints, summaries, plot, visualize -----------------


TINY = [
    "envs_per_worker=2",
    "envs_per_process=2",
    "rollout_steps=64",
    "minibatches=4",
    "epochs=2",
    "eval_every=2",
    "eval_episodes=1",
    "checkpoint_every=2",
    "max_episode_steps=50",  # short episodes: quick evaluations and videos
]


def _sets(settings):
    return [arg for setting in settings for arg in ("--set", setting)]


def test_train_resume_plot_and_visualize(tmp_path, capsys):
    logdir = tmp_path / "run"
    with socket.socket() as taken:  # a busy metrics port is logged, never fatal
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sets = _sets([*TINY, "total_steps=512", f"metrics_port={port}"])
        assert run("train", "--config", "pendulum", *sets, "--logdir", logdir) == 0

    saved = yaml.safe_load((logdir / "config.yaml").read_text())
    assert saved["env_id"] == "Pendulum-v1"
    assert saved["rollout_steps"] == 64
    assert [p.name for p in checkpoints.list_checkpoints(logdir)] == ["ckpt-00000002", "ckpt-00000004"]
    evaluations = read_scalars(logdir, "eval/mean_return")
    assert [step for step, _ in evaluations] == [256, 512]
    assert all(-1000 < value < 0 for _, value in evaluations)
    assert read_scalars(logdir, "train/mean_length") == [(128 * i, 50.0) for i in range(1, 5)]
    for tag in ("loss/policy", "loss/value", "policy/kl", "policy/clipfrac", "optimizer/learning_rate"):
        assert len(read_scalars(logdir, tag)) == 4, tag
    shares = [share for _, share in read_scalars(logdir, "perf/simulation_share")]
    assert len(shares) == 4 and all(0 < share <= 1 for share in shares)
    final = rundir.load_summary(logdir)
    assert (final["env_steps"], final["iterations"]) == (512, 4)
    assert final["eval_mean_return"] == pytest.approx(evaluations[-1][1], rel=1e-6)

    assert run("train", "--resume", "--set", "total_steps=1024", "--logdir", logdir) == 0
    assert [p.name for p in checkpoints.list_checkpoints(logdir)] == [f"ckpt-0000000{i}" for i in (4, 6, 8)]
    steps = [step for step, _ in read_scalars(logdir, "loss/value")]
    assert steps == [128 * i for i in range(1, 9)]  # counters continued from the checkpoint
    assert yaml.safe_load((logdir / "config.yaml").read_text())["total_steps"] == 1024
    assert run("train", "--resume", "--logdir", logdir) == 0  # a finished run: nothing to do, true counts
    assert rundir.load_summary(logdir)["env_steps"] == 1024

    capsys.readouterr()
    assert run("plot", "--logdir", logdir, "--out", tmp_path / "curve.png", "--tag", "eval/mean_return") == 0
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert run("visualize", "--logdir", logdir, "--out", tmp_path / "policy.gif") == 0
    assert (tmp_path / "policy.gif").read_bytes()[:6] == b"GIF89a"
    assert "1 episode(s) of ckpt-00000008" in capsys.readouterr().out
    assert run("visualize", "--logdir", logdir, "--out", tmp_path / "policy.mp4", "--episodes", "2") == 0
    assert (tmp_path / "policy.mp4").stat().st_size > 1000
    assert "2 episode(s)" in capsys.readouterr().out


def test_a_run_whose_checkpoints_cannot_be_restored_fails_with_one_line_naming_the_cause(tmp_path, capsys):
    logdir = tmp_path / "run"
    broken = logdir / "checkpoints" / "ckpt-00000002"
    broken.mkdir(parents=True)
    (broken / "model.index").write_bytes(b"garbage")
    sets = _sets([*TINY, "metrics_port=0"])  # the default port may be another test's
    assert run("train", "--config", "pendulum", *sets, "--logdir", logdir, "--resume") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("agents-operator train: error: none of the 1 checkpoints in ")
    assert "ckpt-00000002: " in err[-1] and "too short to be an sstable" in err[-1]
    assert "Traceback" not in "\n".join(err)
