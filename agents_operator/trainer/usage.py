"""What a user hands the trainer's commands, checked before they run: each mistake (an unknown environment, an
env server that does not answer or serves another one, a run directory without a run) is one line, a
`UsageError`, which `commands` prints and exits with 2 on.
"""

from __future__ import annotations

import os
from pathlib import Path

from agents_operator import tfconfig
from agents_operator.config import TrainerConfig
from agents_operator.trainer import rundir

_ENV_SERVER_STARTUP_SECONDS = 10.0  # how long `visualize --env-server` waits for the server to answer


class UsageError(Exception):
    """A mistake in the command line or the run directory, reported as one line."""


def check_env_id(env_id: str) -> None:
    """Make the environment once here, so an unknown id is one line and not a worker's traceback."""
    import gymnasium

    from agents_operator.trainer.envs.make import make_env

    try:
        make_env(env_id).close()
    except (gymnasium.error.Error, ModuleNotFoundError) as error:
        raise UsageError(f"env_id {env_id!r}: {error}") from None


def env_servers() -> tfconfig.EnvServers | None:
    try:
        return tfconfig.env_servers_from_env(os.environ)
    except tfconfig.TFConfigError as error:
        raise UsageError(str(error)) from None  # its messages name AGENTS_ENV_SERVERS


def check_env_server(address: str, env_id: str) -> None:
    """Ask the env server for its spec once here, so a wrong address or environment is one line."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--env-server {address!r}: expected HOST:PORT")
    from agents_operator.trainer.envserver import client, connection

    try:
        client.connect([address], env_id, startup_timeout=_ENV_SERVER_STARTUP_SECONDS).close()
    except (connection.EnvServerError, ValueError) as error:
        raise UsageError(f"--env-server {address}: {error}") from None


def saved_config(logdir: Path) -> TrainerConfig:
    config = load_saved(logdir)
    if config is None:
        raise UsageError(f"no run in {logdir} (no {rundir.CONFIG_FILE})")
    return config


def load_saved(logdir: Path) -> TrainerConfig | None:
    try:
        return rundir.load_config(logdir)
    except rundir.UnreadableConfig as error:
        raise UsageError(str(error)) from None


def importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
