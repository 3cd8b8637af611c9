"""What one process of a job runs, as data: the launch spec. Pure module.

`render` builds a `Launch` for every container that runs `agents-operator` (the trainer in each replica, the
env servers) and serialises it into the container with `container`; the local launcher takes the same
launches, changes fields (its run directory, its ports, its peers on localhost, its own settings) and
serialises them into a command line and an environment with `argv` and `environment`, which `container`
uses too. Nothing edits a
command line after it is built.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents_operator import tfconfig

COMMAND = "agents-operator"
"""The program every launch runs (its sub-command is `Launch.program`)."""
TRAIN = "train"
ENV_SERVER = "env-server"
LOGDIR_VAR = "AGENTS_LOGDIR"
JOB_VAR, NAMESPACE_VAR = "AGENTS_JOB_NAME", "AGENTS_NAMESPACE"
TYPE_VAR, INDEX_VAR = "AGENTS_REPLICA_TYPE", "AGENTS_REPLICA_INDEX"


@dataclass(frozen=True)
class Launch:
    """One `agents-operator` process: its program and settings, where it writes, where it listens, and
    whom it talks to."""

    program: str
    """The sub-command: TRAIN or ENV_SERVER."""
    options: tuple[tuple[str, str], ...] = ()
    """The program's own options in order, as (name, value): `--name value`."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Trainer settings over its preset (snake_case names): `--set name=value`, in name order."""
    logdir: str | None = None
    """The run directory (`--logdir`, and AGENTS_LOGDIR for whatever else runs in the container)."""
    resume: bool = False
    """Continue the run in `logdir` if there is one (`--resume`)."""
    port: int | None = None
    """The port the process serves on (`--port`), when it is a server that is told its port."""
    job: str = ""
    namespace: str = ""
    peers: tfconfig.TFConfig | None = None
    """The cluster and this process's task in it (TF_CONFIG); None for a process outside it (an env server)."""
    cluster_file: str | None = None
    """Where the process reads the cluster of `peers` (AGENTS_CLUSTER_FILE), whose executor puts it there (the
    operator: the job's ConfigMap; the local launcher: a file of the run directory); TF_CONFIG then names only
    the task. None: TF_CONFIG carries the cluster."""
    env_servers: tfconfig.EnvServers | None = None
    """Where its environments are simulated, when not in its own subprocesses (AGENTS_ENV_SERVERS)."""


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def argv(launch: Launch) -> list[str]:
    """The arguments of `agents-operator` that run `launch`."""
    args = [launch.program]
    for name, value in launch.options:
        args += [f"--{name}", value]
    for name in sorted(launch.settings):
        args += ["--set", f"{name}={_value(launch.settings[name])}"]
    if launch.logdir is not None:
        args += ["--logdir", launch.logdir]
    if launch.port is not None:
        args += ["--port", str(launch.port)]
    return [*args, "--resume"] if launch.resume else args


def environment(launch: Launch) -> dict[str, str]:
    """The environment variables `launch` sets, in order."""
    env: dict[str, str] = {}
    if launch.peers is not None:
        if launch.cluster_file is None:
            env[tfconfig.ENV_VAR] = launch.peers.to_json()
        else:
            env[tfconfig.ENV_VAR] = launch.peers.task_json()
            env[tfconfig.CLUSTER_FILE_VAR] = launch.cluster_file
        env.update({JOB_VAR: launch.job, NAMESPACE_VAR: launch.namespace})
        env.update({TYPE_VAR: launch.peers.task_type, INDEX_VAR: str(launch.peers.task_index)})
    if launch.logdir is not None:
        env[LOGDIR_VAR] = launch.logdir
    env["PYTHONUNBUFFERED"] = "1"
    if launch.env_servers is not None:
        env[tfconfig.ENV_SERVERS_VAR] = launch.env_servers.to_json()
    return env


def container(launch: Launch) -> dict[str, list]:
    """`launch` as the fields of a container: command, args and env (EnvVar objects)."""
    env = [{"name": name, "value": value} for name, value in environment(launch).items()]
    return {"command": [COMMAND], "args": argv(launch), "env": env}


def runs(fields: Mapping[str, Any], launch: Launch) -> bool:
    """Whether a container with these fields runs `launch`, rather than a command its template gave."""
    ours = container(launch)
    return fields.get("command") == ours["command"] and fields.get("args") == ours["args"]
