"""The evaluator (trainer/evaluator.py): it scores the chief's checkpoints on an env server as it does here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agents_operator import presets
from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer import evaluator
from agents_operator.trainer.summaries import read_scalars
from tests.trainer.remote_runs import TINY, no_simulator


def test_the_evaluator_scores_on_the_server_as_it_does_here(
    remote_run: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir, address = remote_run
    config = TrainerConfig.model_validate({**presets.resolve("pendulum").model_dump(), **TINY})
    local = shutil.copytree(logdir, tmp_path / "local")
    assert evaluator.run(config, local, poll_seconds=0.1) == 0
    with monkeypatch.context() as patched:
        no_simulator(patched)
        assert evaluator.run(config, logdir, poll_seconds=0.1, env_servers=EnvServers((address,))) == 0
    scored = read_scalars(logdir / "evaluator", "eval/mean_return")
    assert [step for step, _ in scored] == [512]
    assert scored == read_scalars(local / "evaluator", "eval/mean_return")
