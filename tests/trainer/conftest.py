"""Fixtures shared by the trainer's test files: `remote_run`, a run trained on an env server, for test_loop,
test_evaluator and test_visualize (one per session: each pytest-xdist worker that needs it trains it once); and
`learner`, a small learner, for test_learner and test_checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agents_operator import tfconfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer.learner import Learner
from tests.trainer import learners
from tests.trainer.cli import run
from tests.trainer.envserver.servers import ServerProcess
from tests.trainer.remote_runs import TINY, no_simulator


@pytest.fixture(scope="session")
def remote_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A run trained by `agents-operator train` with an env server in its own process in rollout mode, in a
    process that cannot make environments; yields the run directory and the server's address."""
    logdir = tmp_path_factory.mktemp("remote") / "run"
    server = ServerProcess("--env", "Pendulum-v1", "--envs", 2, "--max-episode-steps", 50, "--port", 0)
    try:
        with pytest.MonkeyPatch.context() as monkeypatch:
            no_simulator(monkeypatch)
            sets = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]
            with pytest.raises(AssertionError, match="made an environment"):  # the patch bites
                run("train", "--config", "pendulum", *sets, "--logdir", logdir)
            assert not logdir.exists()
            servers = EnvServers((server.address,), "rollout").to_json()
            monkeypatch.setenv(tfconfig.ENV_SERVERS_VAR, servers)
            assert run("train", "--config", "pendulum", *sets, "--logdir", logdir) == 0
        yield logdir, server.address
    finally:
        server.stop()


@pytest.fixture
def learner():
    """A small learner (`learners.small_config`) of 3 observations and 2 actions."""
    learner = Learner(learners.small_config(), learners.OBS, learners.ACT)
    yield learner
    learner.close()
