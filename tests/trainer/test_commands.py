"""Mistakes on the trainer's command line: one line on stderr, exit code 2, before anything heavy starts."""

import pytest
import yaml

from agents_operator import presets, tfconfig
from agents_operator.config import CHANGEABLE_ON_RESUME, TrainerConfig
from agents_operator.trainer import commands, rundir

from .cli import run


def _error(capsys, *argv):
    code = run(*argv)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


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
        (["--config", "pendulum", "--set", "epochs=[1"], "--set epochs: '[1' is not a YAML value"),
        ([], "--config PRESET is required to start a run"),
        (["--config", "pendulum", "--set", "env_id=Nope-v0"], "env_id 'Nope-v0': Environment `Nope` doesn't exist"),
    ],
)
def test_train_usage_errors(capsys, tmp_path, argv, expected):
    assert expected in _error(capsys, "train", "--logdir", tmp_path / "run", *argv)
    assert not (tmp_path / "run").exists()


def test_settings_are_yaml_and_accept_camel_case():
    settings = commands.parse_overrides(["policy_layers=[128,128]", "maxGradNorm=null", "env_id=Pendulum-v1"])
    assert settings == {"policy_layers": [128, 128], "max_grad_norm": None, "env_id": "Pendulum-v1"}
    config = presets.resolve("pendulum", settings)
    assert config.policy_layers == [128, 128]
    assert config.max_grad_norm is None


def test_existing_run_needs_resume_and_resume_rejects_conflicting_settings(capsys, tmp_path):
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    assert "already holds a run: pass --resume" in _error(capsys, "train", "--config", "pendulum", "--logdir", tmp_path)
    err = _error(capsys, "train", "--resume", "--logdir", tmp_path, "--set", "learning_rate=0.5", "--set", "seed=3")
    assert "seed (saved 0, given 3); learning_rate (saved 0.001, given 0.5)" in err
    err = _error(capsys, "train", "--resume", "--config", "cheetah", "--logdir", tmp_path)
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
    err = _error(capsys, "train", "--resume", "--logdir", tmp_path, "--set", setting)
    assert f"settings differ from the run's config.yaml: {setting.split('=')[0]} (saved " in err


def test_settings_changeable_on_resume_are_fields():
    assert CHANGEABLE_ON_RESUME.issubset(TrainerConfig.model_fields)


def test_visualize_and_plot_usage_errors(capsys, tmp_path):
    assert "no run in" in _error(capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.gif")
    rundir.write_config(tmp_path, presets.resolve("pendulum"))
    assert "no checkpoint in" in _error(capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.gif")
    assert "must end in .gif or .mp4" in _error(capsys, "visualize", "--logdir", tmp_path, "--out", tmp_path / "a.png")
    assert "no summaries in" in _error(capsys, "plot", "--logdir", tmp_path, "--out", tmp_path / "c.png")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("envs:50051", "AGENTS_ENV_SERVERS is not valid JSON"),
        ('["envs:50051"]', 'AGENTS_ENV_SERVERS must be a JSON object {"addresses": [...], "mode": ...}'),
        ('{"addresses": []}', "AGENTS_ENV_SERVERS.addresses is empty"),
        ('{"addresses": ["envs"]}', "AGENTS_ENV_SERVERS.addresses must be HOST:PORT strings, got ['envs']"),
        ('{"addresses": ["envs:50051"], "mode": "often"}', "AGENTS_ENV_SERVERS.mode 'often' is not one of step"),
    ],
)
@pytest.mark.parametrize("task", [None, "evaluator"])
def test_malformed_env_servers_are_a_usage_error(capsys, monkeypatch, tmp_path, value, expected, task):
    monkeypatch.setenv(tfconfig.ENV_SERVERS_VAR, value)
    if task is not None:
        config = tfconfig.TFConfig({"worker": ["w:2222"]}, task, 0)
        monkeypatch.setenv(tfconfig.ENV_VAR, config.to_json())
    err = _error(capsys, "train", "--config", "pendulum", "--logdir", tmp_path / "run")
    assert err.startswith(f"agents-operator train: error: {expected}"), err
    assert not (tmp_path / "run").exists()
