"""Run an AgentsJob on this machine: every replica as a local process.

Each process gets the command and environment that `render` gives its pod, with the cluster's host names
mapped to free localhost ports and the run directory moved to a local folder. Restart policies,
backoffLimit, activeDeadlineSeconds and the success policy are honoured as the operator honours them
(`policy.py` holds the shared rules); progress comes from the chief's /metrics endpoint, as it does for
the operator.

Everything a replica serves is for this machine only: its /metrics and env servers listen on loopback
(`tfconfig.BIND_HOST_VAR`), and the CLI first moves the launcher into a network namespace of its own
(`sandbox`), since TensorFlow's servers listen on every interface. Replicas are SIGKILLed by the
kernel when the launcher dies, however it dies.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from agents_operator import naming, policy, render, sandbox, scrape, status, tfconfig
from agents_operator.api import AgentsJob
from agents_operator.trainer import rundir
from agents_operator.trainer.progress import Progress

POLL_SECONDS = 0.5
METRICS_SECONDS = 2.0
STOP_GRACE_SECONDS = 10.0
LOOPBACK = "127.0.0.1"


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


def _replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
    return args


def _main_container(pod: dict, replica_type: str) -> dict:
    name = render.ENV_SERVER_CONTAINER if replica_type == naming.ENV_SERVER else render.TRAINER_CONTAINER
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == name), containers[0])


def _sidecars(pod: dict) -> list[dict]:
    """Native sidecars of the pod (init containers that keep running): its env server, when placed so."""
    return [c for c in pod["spec"].get("initContainers", []) if c.get("restartPolicy") == "Always"]


def plan(
    job: AgentsJob, logdir: Path, ports: dict[str, int] | None = None, metrics_port: int = 0, video: bool = True
) -> list[Replica]:
    """The local processes of `job`: rendered commands and environments, hosts mapped to localhost.

    `ports` pins the local port of a process by its name (`worker-0`, `envserver-1`, `worker-0/env-server`);
    the others get free ports.
    """
    options = render.RenderOptions()
    ports = ports or {}
    env_port = job.spec.environments.port
    local_ports = {f"{t}-{i}": ports.get(f"{t}-{i}") or free_port() for t, i in render.replicas(job)}
    addresses = {
        tfconfig.host(job.name, t, i, job.namespace, options.port): f"localhost:{local_ports[f'{t}-{i}']}"
        for t, i in render.replicas(job)
        if t in tfconfig.CLUSTER_TYPES
    }
    addresses.update(
        {
            tfconfig.host(job.name, t, i, job.namespace, env_port): f"localhost:{local_ports[f'{t}-{i}']}"
            for t, i in render.replicas(job)
            if t == naming.ENV_SERVER
        }
    )
    replicas = []
    for replica_type, index in render.replicas(job):
        pod = render.pod(job, replica_type, index, options)
        own = dict(addresses)
        log = logdir / "logs" / naming.child_name(job.name, replica_type, index)
        for sidecar in _sidecars(pod):
            name = f"{replica_type}-{index}/{sidecar['name']}"
            port = ports.get(name) or free_port()
            own[f"localhost:{env_port}"] = f"localhost:{port}"  # the pod's localhost, here its own port
            process = _process(sidecar, logdir, {}, port, metrics_port, video)
            replicas.append(
                Replica(
                    replica_type,
                    index,
                    *process,
                    restart_policy="Always",
                    log_path=log.with_name(f"{log.name}.{sidecar['name']}.log"),
                    sidecar=sidecar["name"],
                )
            )
        port = local_ports[f"{replica_type}-{index}"] if replica_type == naming.ENV_SERVER else None
        replicas.append(
            Replica(
                replica_type,
                index,
                *_process(_main_container(pod, replica_type), logdir, own, port, metrics_port, video),
                restart_policy=job.spec.restart_policy(replica_type),
                log_path=log.with_name(f"{log.name}.log"),
            )
        )
    return replicas


def _process(
    container: dict, logdir: Path, addresses: dict[str, str], port: int | None, metrics_port: int, video: bool
) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one rendered container as a local process."""
    # The pod's scratch locations (/tmp for HOME and caches) are for its read-only root; here the user's own apply.
    env = {
        e["name"]: e["value"] for e in container.get("env", []) if "value" in e and e["name"] not in render.SCRATCH_ENV
    }
    env[tfconfig.BIND_HOST_VAR] = LOOPBACK
    if tfconfig.ENV_VAR in env:
        env[tfconfig.ENV_VAR] = tfconfig.parse(env[tfconfig.ENV_VAR]).with_addresses(addresses).to_json()
    if tfconfig.ENV_SERVERS_VAR in env:
        servers = tfconfig.parse_env_servers(env[tfconfig.ENV_SERVERS_VAR]).with_addresses(addresses)
        env[tfconfig.ENV_SERVERS_VAR] = servers.to_json()
    if "AGENTS_LOGDIR" in env:
        env["AGENTS_LOGDIR"] = str(logdir)
    command = container.get("command", [])
    args = _replace_flag(container.get("args", []), "--logdir", str(logdir))
    if port is not None:
        args = _replace_flag(args, "--port", str(port))
    if command == ["agents-operator"]:
        # The same program as in the pod, from this interpreter's environment.
        command = [sys.executable, "-m", "agents_operator"]
        if "train" in args:
            local_settings = [f"metrics_port={metrics_port}"] if metrics_port else []
            local_settings += [] if video else ["video_episodes=0"]
            args = [*args[:-1], *(a for s in local_settings for a in ("--set", s)), args[-1]]
    return [*command, *args], env


class Tracker:
    """Job-wide progress from the chief's metrics; steps per second are measured here, over the whole run."""

    def __init__(self, total_steps: int, out: TextIO):
        self.display = Progress(total_steps, out)
        self.last: dict[str, float] = {}
        self._first: tuple[float, float] | None = None
        self.rate = 0.0

    def update(self, metrics: dict[str, float] | None) -> None:
        if not metrics:
            return
        now, steps = time.monotonic(), metrics.get(status.METRIC_ENV_STEPS, 0.0)
        if self.last and steps == self.last.get(status.METRIC_ENV_STEPS):
            return  # nothing new: the chief is between iterations, or done
        if self._first is None:
            self._first = (now, steps)
        elif now > self._first[0]:
            self.rate = (steps - self._first[1]) / (now - self._first[0])
        self.last = metrics
        self.display.update(int(steps), metrics.get(status.METRIC_MEAN_RETURN), self.rate)

    def finish(self) -> None:
        self.display.close()

    def summary(self) -> str:
        if not self.last:
            return "no progress was reported (the chief's /metrics never answered)"
        parts = [f"{int(self.last.get(status.METRIC_ENV_STEPS, 0))} env steps"]
        if status.METRIC_GLOBAL_STEP in self.last:
            parts.append(f"global step {int(self.last[status.METRIC_GLOBAL_STEP])}")
        if status.METRIC_MEAN_RETURN in self.last:
            parts.append(f"mean return {self.last[status.METRIC_MEAN_RETURN]:.1f}")
        if status.METRIC_EVAL_RETURN in self.last:
            parts.append(f"eval return {self.last[status.METRIC_EVAL_RETURN]:.1f}")
        if self.rate:
            parts.append(f"{self.rate:.0f} env steps/s")
        return ", ".join(parts)


def _kill_leftovers(replica: Replica) -> None:
    """SIGKILL what is left of the process group of a replica whose leader has just been reaped.

    Env subprocesses or anything the replica started may outlive it, as a pod's processes do not. This runs
    at once: while a member of the group lives, its id cannot be given to a new process, but once none does,
    the id is free, and a killpg minutes later could hit a stranger that now leads a group of that number.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(replica.process.pid, signal.SIGKILL)


class Launcher:
    """Starts, watches, restarts and stops the replicas of one job."""

    def __init__(self, job: AgentsJob, logdir: Path, out: TextIO = sys.stderr, video: bool = True):
        self.job = job
        self.logdir = logdir
        self.out = out
        self.metrics_port = free_port()
        self.replicas = plan(job, logdir, metrics_port=self.metrics_port, video=video)
        self.metrics_url = f"http://{LOOPBACK}:{self.metrics_port}/metrics"
        self.restarts = 0
        self.started = time.monotonic()
        self.tracker = Tracker(job.trainer_config().total_steps, out)

    # --- processes ---------------------------------------------------------------------------------------

    def _start(self, replica: Replica) -> None:
        """Start `replica`; only from the thread that lives as long as the launcher (see `sandbox`)."""
        replica.log_path.parent.mkdir(parents=True, exist_ok=True)
        if replica.log_file is None:
            replica.log_file = replica.log_path.open("a", buffering=1)
        replica.attempts += 1
        replica.exit_code = None
        replica.log_file.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} start, attempt {replica.attempts} ---\n")
        replica.process = subprocess.Popen(
            replica.argv,
            env={**os.environ, **replica.env},
            stdout=replica.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us only; we stop every group ourselves
            preexec_fn=functools.partial(sandbox.die_with_parent, os.getpid()) if sandbox.LINUX else None,
        )

    def _signal(self, replica: Replica, sig: int) -> None:
        if replica.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(replica.process.pid, sig)

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM every replica's process group, then SIGKILL what is left after `grace` seconds."""
        for replica in self.replicas:
            self._signal(replica, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(r.running for r in self.replicas) and time.monotonic() < deadline:
            time.sleep(0.1)
        for replica in self.replicas:
            if replica.running:
                self._signal(replica, signal.SIGKILL)
                replica.process.wait()
            if replica.process is not None and replica.exit_code is None:  # ended during this stop
                _kill_leftovers(replica)
        for replica in self.replicas:
            if replica.log_file is not None:
                replica.log_file.close()
                replica.log_file = None

    # --- the job -----------------------------------------------------------------------------------------

    def run(self) -> policy.Outcome:
        """Run the job to its end; the outcome says whether it succeeded and why not."""
        self.started = time.monotonic()
        for replica in self.replicas:
            self._start(replica)
        last_metrics = 0.0
        try:
            while True:
                outcome = self._step()
                if outcome is not None:
                    return outcome
                if time.monotonic() - last_metrics >= METRICS_SECONDS:
                    last_metrics = time.monotonic()
                    self.tracker.update(scrape.scrape(self.metrics_url))
                time.sleep(POLL_SECONDS)
        finally:
            self.tracker.update(scrape.scrape(self.metrics_url))
            self.stop_all()
            self.tracker.finish()

    def _step(self) -> policy.Outcome | None:
        for replica in self.replicas:
            if replica.process is None or replica.exit_code is not None:
                continue
            code = replica.process.poll()
            if code is None:
                continue
            replica.exit_code = code if code >= 0 else 128 - code  # a signal, as a container runtime reports it
            _kill_leftovers(replica)
            print(f"{replica.name} exited with code {replica.exit_code}", file=self.out)
            if replica.sidecar is not None:
                # As the kubelet does with a native sidecar: restarted, not counted against backoffLimit.
                print(f"restarting {replica.name}", file=self.out)
                self._start(replica)
                continue
            if replica.exit_code == 0:
                continue
            if not policy.should_restart(replica.restart_policy, replica.exit_code):
                return policy.Outcome(
                    False,
                    "Failed",
                    f"{replica.name} failed with exit code {replica.exit_code} "
                    f"(restartPolicy {replica.restart_policy})",
                )
            if self.restarts >= self.job.spec.run_policy.backoff_limit:
                return policy.Outcome(
                    False,
                    "BackoffLimitExceeded",
                    f"{replica.name} failed again after {self.restarts} restarts "
                    f"(backoffLimit {self.job.spec.run_policy.backoff_limit})",
                )
            self.restarts += 1
            print(f"restarting {replica.name} (restart {self.restarts})", file=self.out)
            self._start(replica)
        workers = {r.index: r.exit_code for r in self.replicas if r.type == naming.WORKER and r.sidecar is None}
        if policy.succeeded(self.job.spec.success_policy, workers):
            return policy.Outcome(True, "Succeeded", "the job's workers finished")
        deadline = self.job.spec.run_policy.active_deadline_seconds
        if deadline is not None and time.monotonic() - self.started > deadline:
            return policy.Outcome(False, "DeadlineExceeded", f"the job ran longer than {deadline} s")
        return None


def run_local(job: AgentsJob, logdir: Path, video: bool = True, out: TextIO = sys.stderr) -> int:
    """Run `job` here; 0 only when it succeeded. LaunchError when its run directory is unusable."""
    prepare_logdir(logdir)
    launcher = Launcher(job, logdir, out, video=video)
    counts = job.spec.replica_specs.counts()
    placement = job.spec.environments.placement
    servers = sum(1 for r in launcher.replicas if r.type == naming.ENV_SERVER or r.sidecar)
    print(
        f"running AgentsJob {job.name}: {counts['ps']} ps, {counts['worker']} worker(s)"
        + (f", {counts['evaluator']} evaluator" if counts["evaluator"] else "")
        + (f", {servers} env server(s) ({placement})" if servers else "")
        + f"; run directory {logdir}",
        file=out,
    )
    interrupted = False

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcome = launcher.run()
    except KeyboardInterrupt:
        interrupted = True
        outcome = policy.Outcome(False, "Interrupted", "stopped by the user; every replica was stopped")
    finally:
        signal.signal(signal.SIGTERM, previous)
    made = logdir / rundir.VIDEO if outcome.succeeded and (logdir / rundir.VIDEO).exists() else None
    summary = launcher.tracker.summary()
    print(f"{outcome.reason}: {outcome.message}", file=out)
    print(f"  {summary}", file=out)
    print(f"  run directory: {logdir}  (logs in {logdir / 'logs'})", file=out)
    if made:
        print(f"  video: {made}", file=out)
    if interrupted:
        return 130
    return 0 if outcome.succeeded else 1
