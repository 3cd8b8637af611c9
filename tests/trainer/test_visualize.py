"""`visualize` (trainer/visualize.py): through an env server it renders the video it renders here, and a bad
server is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.trainer import visualize
from tests.trainer.cli import run
from tests.trainer.envserver.servers import serving
from tests.trainer.envserver_envs import RAISING
from tests.trainer.remote_runs import TINY, no_simulator


def test_visualize_renders_through_a_server_the_video_it_renders_here(
    remote_run: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    logdir, address = remote_run
    config = TrainerConfig.model_validate({**presets.resolve("pendulum").model_dump(), **TINY})
    here, _ = visualize.render(config, logdir, tmp_path / "here.gif", 2)
    with monkeypatch.context() as patched:
        no_simulator(patched)
        there, _ = visualize.render(config, logdir, tmp_path / "there.gif", 2, address)
        capsys.readouterr()
        assert run("visualize", "--logdir", logdir, "--out", tmp_path / "cli.gif", "--env-server", address) == 0
    assert there == here
    assert (tmp_path / "there.gif").read_bytes() == (tmp_path / "here.gif").read_bytes()
    assert "1 episode(s) of ckpt-00000004, returns" in capsys.readouterr().out
    assert (tmp_path / "cli.gif").read_bytes()[:6] == b"GIF89a"


def test_visualize_refuses_a_bad_env_server_in_one_line(
    remote_run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logdir, _ = remote_run
    out = tmp_path / "a.gif"
    assert run("visualize", "--logdir", logdir, "--out", out, "--env-server", "nowhere") == 2
    assert capsys.readouterr().err == "agents-operator visualize: error: --env-server 'nowhere': expected HOST:PORT\n"
    with serving(RAISING, 1) as address:
        assert run("visualize", "--logdir", logdir, "--out", out, "--env-server", address) == 2
    error = capsys.readouterr().err
    assert error == f"agents-operator visualize: error: --env-server {address}: env server {address} serves " + (
        f"{RAISING}, not Pendulum-v1\n"
    )
    assert not out.exists()
