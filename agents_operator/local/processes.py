"""The local processes of a job: each container of each rendered pod as a command and an environment, with
the launch render gave it localised to this machine (peers and env servers on free localhost ports, the
run directory a local folder, the launcher's own trainer settings); and the run directory's checks.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from agents_operator import launch, naming, render, tfconfig
from agents_operator.api import AgentsJob
from agents_operator.launch import Launch
from agents_operator.trainer import rundir

LOOPBACK = "127.0.0.1"
"""Where everything a local replica serves listens."""


class LaunchError(Exception):
    """The job cannot be started here (its run directory is unusable); the message says why, in one line."""


def free_port() -> int:
    """A TCP port on localhost that nothing listens on right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def prepare_logdir(logdir: Path) -> None:
    """Create the run directory and check that files can be written in it; LaunchError names the path
    and the reason when not."""
    for path in (logdir, *logdir.parents):
        if path.exists():
            if not path.is_dir():
                raise LaunchError(f"run directory {logdir}: {path} is in the way: it is a file, not a directory")
            break
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LaunchError(f"run directory {logdir}: cannot create it: {error.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=logdir):
            pass
    except OSError as error:
        raise LaunchError(f"run directory {logdir}: cannot write in it: {error.strerror}") from None


@dataclass
class Replica:
    """One replica of the job (or the env-server sidecar of one) as a local process."""

    type: str
    index: int
    argv: list[str]
    env: dict[str, str]
    restart_policy: str
    """The container's restartPolicy in its pod, applied as the kubelet does: Always for a native sidecar
    (restarted in place), the pod's Never for its main container (the plan replaces a failed pod)."""
    log_path: Path
    sidecar: str | None = None
    """The sidecar container this process plays, or None for the pod's main container."""
    process: subprocess.Popen | None = None
    attempts: int = 0
    exit_code: int | None = None
    log_file: TextIO | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.type}-{self.index}" + (f"/{self.sidecar}" if self.sidecar else "")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _main_container(pod: dict, replica_type: str) -> dict:
    containers = pod["spec"]["containers"]
    return containers[naming.main_index([c["name"] for c in containers], replica_type)]


def _sidecars(pod: dict) -> list[dict]:
    """Native sidecars of the pod (init containers that keep running): its env server, when placed so."""
    return [c for c in pod["spec"].get("initContainers", []) if c.get("restartPolicy") == "Always"]


@dataclass(frozen=True)
class _Machine:
    """What is different when a job's launches run on this machine rather than in its pods."""

    logdir: Path
    ports: dict[tuple[str, int], int]
    """The local port of each pod of the job, by (type, index)."""
    settings: dict[str, int]
    """Trainer settings of this launcher (`local_settings`)."""

    def localise(self, rendered: Launch, port: int | None = None, env_servers: Sequence[int] = ()) -> Launch:
        """`rendered` as it runs here: in the local run directory, with its peers and its env servers (on ports
        `env_servers`) on localhost, serving on `port`, with this launcher's trainer settings."""
        servers = rendered.env_servers
        return replace(
            rendered,
            settings={**rendered.settings, **self.settings} if rendered.program == launch.TRAIN else rendered.settings,
            logdir=None if rendered.logdir is None else str(self.logdir),
            port=port,
            peers=rendered.peers.on_local_ports(self.ports) if rendered.peers else None,
            cluster_file=None if rendered.cluster_file is None else str(cluster_file(self.logdir)),
            env_servers=replace(servers, addresses=tuple(map(tfconfig.localhost, env_servers))) if servers else None,
        )


def cluster_file(logdir: Path) -> Path:
    """Where the local replicas read the job's cluster: what the pods mount from its ConfigMap."""
    return logdir / rundir.LOGS / tfconfig.CLUSTER_KEY


def write_cluster(config_map: dict, logdir: Path, ports: dict[str, int]) -> None:
    """The cluster of the job's ConfigMap, with its members on their local `ports` (by name: `worker-0`), into
    `cluster_file`; the launcher does this where the operator creates the ConfigMap."""
    cluster = tfconfig.parse_cluster(config_map["data"][tfconfig.CLUSTER_KEY])
    by_member = {(t, i): ports[f"{t}-{i}"] for t, members in cluster.items() for i in range(len(members))}
    local = tfconfig.on_local_ports(cluster, by_member)
    path = cluster_file(logdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tfconfig.cluster_json(local))


def plan(
    job: AgentsJob, logdir: Path, ports: dict[str, int] | None = None, metrics_port: int = 0, video: bool = True
) -> list[Replica]:
    """The local processes of `job`: each rendered container with the launch render gave it, localised (peers
    and env servers on localhost, the local run directory, this launcher's settings).

    `ports` pins the local port of a process by its name (`worker-0`, `envserver-1`, `worker-0/env-server`);
    the others get free ports.
    """
    ports = {**member_ports(job, ports), **(ports or {})}
    layout = job.topology
    machine = _Machine(
        logdir,
        {(t, i): ports.get(f"{t}-{i}") or free_port() for t, i in dict.fromkeys([*layout.slots(), *_members(job)])},
        local_settings(metrics_port, video),
    )
    replicas = []
    for replica_type, index in layout.slots():
        rendered = render.rendered_pod(job, replica_type, index)
        pod, launches = rendered.pod, rendered.launches
        log = logdir / rundir.LOGS / naming.child_name(job.name, replica_type, index)
        servers = [machine.ports[naming.ENV_SERVER, k] for k in layout.env_server_pods(replica_type, index)]
        for sidecar in _sidecars(pod):
            name = f"{replica_type}-{index}/{sidecar['name']}"
            port = ports.get(name) or free_port()
            serves = launches.get(sidecar["name"])
            if serves is not None:
                servers = [port]  # on the pod's localhost, here a port of its own
            argv, env = _process(sidecar, serves, machine.localise(serves, port) if serves else None)
            log_path = log.with_name(f"{log.name}.{sidecar['name']}.log")
            replicas.append(Replica(replica_type, index, argv, env, "Always", log_path, sidecar=sidecar["name"]))
        main = _main_container(pod, replica_type)
        runs = launches[main["name"]]
        port = machine.ports[replica_type, index] if replica_type == naming.ENV_SERVER else None
        argv, env = _process(main, runs, machine.localise(runs, port, servers))
        policy = pod["spec"]["restartPolicy"]  # the pod's: the plan replaces a failed pod
        replicas.append(Replica(replica_type, index, argv, env, policy, log.with_name(f"{log.name}.log")))
    return replicas


def member_ports(job: AgentsJob, pinned: dict[str, int] | None = None) -> dict[str, int]:
    """A local port for each member of the job's cluster, by name (`ps-0`, `worker-3`): every worker slot of an
    elastic job, taken or not, since every TF_CONFIG lists them all; the `pinned` ones as given."""
    pinned = pinned or {}
    return {name: pinned.get(name) or free_port() for name in (f"{t}-{i}" for t, i in _members(job))}


def _members(job: AgentsJob) -> list[tuple[str, int]]:
    members = job.topology.members
    return [(t, i) for t in tfconfig.CLUSTER_TYPES for i in range(members.get(t, 0))]


def local_settings(metrics_port: int, video: bool) -> dict[str, int]:
    """Trainer settings the launcher adds to the rendered `train` launches."""
    settings = {"metrics_port": metrics_port} if metrics_port else {}
    if not video:
        settings["video_episodes"] = 0
    return settings


def check_resume(job: AgentsJob, logdir: Path, video: bool = True) -> None:
    """LaunchError naming the settings that differ when `logdir` holds a run that `job` may not resume.

    Checked before any replica starts: otherwise each one fails alone with the same error, and the first to
    fail (the ps, started first) is restarted by its policy before a worker's failure ends the job.
    """
    try:
        saved = rundir.load_config(logdir)
    except rundir.UnreadableConfig as error:
        raise LaunchError(f"run directory {logdir}: {error}") from None
    if saved is None:
        return
    try:
        rundir.check_resume(saved, job.config.model_copy(update=local_settings(0, video)))
    except rundir.ConfigConflict as conflict:
        raise LaunchError(
            f"run directory {logdir} holds a run with other settings: {'; '.join(conflict.conflicts)}; "
            "set them back in the job, or pick another --logdir"
        ) from None


def _process(container: dict, rendered: Launch | None, local: Launch | None) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one rendered container as a local process: what its `rendered` launch sets,
    `local` sets instead (None: the container runs no launch, a sidecar of the template's own)."""
    # The pod's scratch locations (/tmp for HOME and caches) are for its read-only root; here the user's own apply.
    env = {
        e["name"]: e["value"] for e in container.get("env", []) if "value" in e and e["name"] not in render.SCRATCH_ENV
    }
    command, args = container.get("command", []), container.get("args", [])
    if rendered is not None:
        before = launch.environment(rendered)
        env.update({name: value for name, value in launch.environment(local).items() if before.get(name) != value})
        if launch.runs(container, rendered):
            args = launch.argv(local)
    env[tfconfig.BIND_HOST_VAR] = LOOPBACK
    if command == [launch.COMMAND]:
        command = [sys.executable, "-m", "agents_operator"]  # the same program as in the pod, from this interpreter
    return [*command, *args], env
