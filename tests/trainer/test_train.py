"""End to end through the CLI functions: train, resume, checkpoints, summaries, plot, visualize."""

import socket
import urllib.request

import pytest
import yaml

from agents_operator.trainer import checkpoints, rundir
from agents_operator.trainer.metrics import Metrics
from agents_operator.trainer.summaries import read_scalars

from .cli import run

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


def test_metrics_endpoint_serves_the_gauges():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics = Metrics(port)
    try:
        unknown = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        metrics.env_steps.set(1234)
        metrics.mean_return.set(-150.5)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics.close()
    assert "agents_trainer_env_steps 1234.0" in text
    # a resumed run's counters are not 0 before the chief has read them: unknown, left out by readers
    assert "agents_trainer_env_steps NaN" in unknown and "agents_trainer_global_step NaN" in unknown
    assert "agents_trainer_mean_return -150.5" in text


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
