"""The trainer with its environments on env servers (AGENTS_ENV_SERVERS): training in both modes, the chief's
evaluations and video, the evaluator and `visualize --env-server`, all without a simulator in the trainer."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from agents_operator import presets, tfconfig
from agents_operator.config import TrainerConfig
from agents_operator.tfconfig import EnvServers
from agents_operator.trainer import evaluator, loop, visualize
from agents_operator.trainer.summaries import read_scalars

from .cli import run
from .envserver_envs import RAISING
from .test_envserver import ServerProcess, serving

# --- learning -------------------------------------------------------------------------------------------

# The pendulum preset learns within 40k steps: from about -1250 to -300 (training), -130 (evaluation). Its 8
# environments run in two groups of 4, locally (two processes) as on two env servers.
LEARNING = presets.resolve(
    "pendulum",
    {
        "total_steps": 40_960,
        "eval_every": 10,
        "eval_episodes": 2,
        "video_episodes": 0,
        "metrics_port": 0,
        "envs_per_process": 4,
    },
)


@contextlib.contextmanager
def two_servers() -> Iterator[tuple[str, str]]:
    """Two env servers of 4 environments, seeded as the colocated batch's two processes."""
    with (
        serving("Pendulum-v1", 4, seed=LEARNING.seed) as first,
        serving("Pendulum-v1", 4, seed=LEARNING.seed + 4) as second,
    ):
        yield first, second


def train(tmp_path: Path, env_servers: EnvServers | None = None) -> loop.RunResult:
    with open(tmp_path / "progress.txt", "w") as stream:
        return loop.train(LEARNING, tmp_path / "run", stream, env_servers=env_servers)


@pytest.fixture(scope="module")
def colocated(tmp_path_factory: pytest.TempPathFactory) -> loop.RunResult:
    return train(tmp_path_factory.mktemp("colocated"))


def assert_learned(result: loop.RunResult) -> None:
    returns = [value for _, value in result.train_returns]
    first, last = np.mean(returns[:3]), np.mean(returns[-3:])
    assert first < -1000 and last > first + 500, returns
    assert [steps for steps, _ in result.evaluations] == [20_480, 40_960]
    assert result.evaluations[-1][1] > -500, result.evaluations
    assert len(result.update_seconds) == len(result.collect_seconds) == result.iterations
    assert 0 < result.evaluation_seconds < result.wall_seconds - sum(result.update_seconds)
    first, second = result.evaluated_after  # training seconds before each evaluation, evaluations excluded
    assert 0 < first < second <= result.wall_seconds - result.evaluation_seconds


def test_step_mode_trains_exactly_as_colocated(tmp_path: Path, colocated: loop.RunResult) -> None:
    """Servers seeded and grouped as the colocated batch: the same batches, so the same run, evaluations
    included."""
    with two_servers() as addresses:
        result = train(tmp_path, EnvServers(addresses, "step"))
    assert_learned(colocated)
    assert result.train_returns == colocated.train_returns
    assert result.evaluations == colocated.evaluations
    assert all(0 < share <= 1 for share in colocated.simulation_shares)  # timed by the worker processes
    assert set(result.simulation_shares) == {None}  # the servers step, the trainer acts: nobody times a rollout
    assert result.simulation_share is None and 0 < colocated.simulation_share <= 1


def test_rollout_mode_learns_as_colocated(tmp_path: Path, colocated: loop.RunResult) -> None:
    """Rollout mode normalises a rollout's first observations with that rollout's statistics (see
    collector): the same first rollout, then a run of its own that learns as well."""
    with two_servers() as addresses:
        result = train(tmp_path, EnvServers(addresses, "rollout"))
    assert_learned(result)
    assert result.train_returns[0] == colocated.train_returns[0]
    assert result.train_returns != colocated.train_returns


def test_servers_that_do_not_serve_the_config_are_refused(tmp_path: Path) -> None:
    with serving("Pendulum-v1", 2) as address, pytest.raises(ValueError) as failure:
        loop.train(LEARNING, tmp_path / "run", env_servers=EnvServers((address,)))
    assert str(failure.value) == f"env servers {address} serve 2 environments in all, envs_per_worker is 8"
    with serving(RAISING, 8) as address, pytest.raises(ValueError) as failure:
        loop.train(LEARNING, tmp_path / "run", env_servers=EnvServers((address,)))
    assert str(failure.value) == f"env server {address} serves {RAISING}, not Pendulum-v1"


# --- no simulator in the trainer ------------------------------------------------------------------------

TINY = {
    "envs_per_worker": 2,
    "rollout_steps": 64,
    "minibatches": 4,
    "epochs": 2,
    "eval_every": 2,
    "eval_episodes": 2,
    "checkpoint_every": 2,
    "max_episode_steps": 50,
    "total_steps": 512,
    "metrics_port": 0,
}


def no_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process unable to make an environment: every local one goes through gymnasium.make, or
    through a BatchEnv whose subprocesses would make theirs."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trainer process made an environment")

    monkeypatch.setattr(gymnasium, "make", refuse)
    monkeypatch.setattr(loop, "BatchEnv", refuse)  # where the trainer looks it up


@pytest.fixture(scope="module")
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


def test_the_chief_evaluates_and_renders_its_video_on_the_server(remote_run: tuple[Path, str]) -> None:
    logdir, _ = remote_run
    evaluations = read_scalars(logdir, "eval/mean_return")
    assert [step for step, _ in evaluations] == [256, 512]
    assert all(-1000 < value < 0 for _, value in evaluations)
    assert read_scalars(logdir, "eval/mean_length") == [(256, 50.0), (512, 50.0)]
    assert (logdir / "videos" / "final.gif").read_bytes()[:6] == b"GIF89a"


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
