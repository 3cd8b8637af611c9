"""Run an AgentsJob on this machine: every replica as a local process.

Each process runs the launch that `render` gives its container (`launch.Launch`), with fields changed for
this machine: its peers and env servers on free localhost ports, the run directory a local folder, and
the launcher's own trainer settings. The lifecycle is the operator's own: the launcher observes its
processes as pods, plans with `reconcile.plan` and executes the plan over processes (`Launcher`), so
restart policies, backoffLimit, activeDeadlineSeconds, the success policy, the reasons and the conditions
are the operator's, and so is the status it prints. Progress comes from the chief's /metrics endpoint, as
it does for the operator.

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import yaml

from agents_operator import (
    chiefmetrics,
    exported,
    launch,
    localreport,
    naming,
    podview,
    reconcile,
    render,
    sandbox,
    scrape,
    tfconfig,
)
from agents_operator.api import AgentsJob
from agents_operator.launch import Launch
from agents_operator.reconcile import conditions, rules
from agents_operator.trainer import rundir

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
            env_servers=replace(servers, addresses=tuple(map(tfconfig.localhost, env_servers))) if servers else None,
        )


def plan(
    job: AgentsJob, logdir: Path, ports: dict[str, int] | None = None, metrics_port: int = 0, video: bool = True
) -> list[Replica]:
    """The local processes of `job`: rendered commands and environments, peers on localhost.

    `ports` pins the local port of a process by its name (`worker-0`, `envserver-1`, `worker-0/env-server`);
    the others get free ports.
    """
    ports = ports or {}
    layout = job.topology
    machine = _Machine(
        logdir,
        {(t, i): ports.get(f"{t}-{i}") or free_port() for t, i in layout.slots()},
        local_settings(metrics_port, video),
    )
    replicas = []
    for replica_type, index in layout.slots():
        pod = render.pod(job, replica_type, index)
        log = logdir / rundir.LOGS / naming.child_name(job.name, replica_type, index)
        servers = [machine.ports[naming.ENV_SERVER, k] for k in layout.env_server_pods(replica_type, index)]
        for sidecar in _sidecars(pod):
            name = f"{replica_type}-{index}/{sidecar['name']}"
            port = ports.get(name) or free_port()
            rendered, local = _sidecar_launch(job, replica_type, index, sidecar), None
            if rendered is not None:
                servers = [port]  # on the pod's localhost, here a port of its own
                local = machine.localise(rendered, port)
            argv, env = _process(sidecar, rendered, local)
            log_path = log.with_name(f"{log.name}.{sidecar['name']}.log")
            replicas.append(Replica(replica_type, index, argv, env, "Always", log_path, sidecar=sidecar["name"]))
        rendered = _main_launch(job, replica_type, index)
        port = machine.ports[replica_type, index] if replica_type == naming.ENV_SERVER else None
        argv, env = _process(_main_container(pod, replica_type), rendered, machine.localise(rendered, port, servers))
        policy = pod["spec"]["restartPolicy"]  # the pod's: the plan replaces a failed pod
        replicas.append(Replica(replica_type, index, argv, env, policy, log.with_name(f"{log.name}.log")))
    return replicas


def _main_launch(job: AgentsJob, replica_type: str, index: int) -> Launch:
    """The launch of a pod's main container: its env server, or its trainer."""
    if replica_type == naming.ENV_SERVER:
        return render.env_server_launch(job, job.topology.remote_share(index))
    return render.trainer_launch(job, replica_type, index)


def _sidecar_launch(job: AgentsJob, replica_type: str, index: int, sidecar: dict) -> Launch | None:
    """The launch of a native sidecar: the env server's, or None for one of the template's own."""
    share = render.sidecar_share(job, replica_type, index)
    if share is None or sidecar["name"] != naming.ENV_SERVER_CONTAINER:
        return None
    return render.env_server_launch(job, share)


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


def _kill_leftovers(replica: Replica) -> None:
    """SIGKILL what is left of the process group of a replica whose leader has just been reaped.

    Env subprocesses or anything the replica started may outlive it, as a pod's processes do not. This runs
    at once: while a member of the group lives, its id cannot be given to a new process, but once none does,
    the id is free, and a killpg minutes later could hit a stranger that now leads a group of that number.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(replica.process.pid, signal.SIGKILL)


class ProcessPod:
    """One pod of the job as local processes: its main container and native sidecars, as `plan` built them.

    The launcher plays the kubelet: a sidecar that dies while the main process runs is restarted in place
    (`Replica.restart_policy` Always), sidecars stop once the main process has ended, and the pod's phase
    is its main process's state.
    """

    def __init__(self, replicas: list[Replica]):
        self.replicas = replicas
        self.main = next(r for r in replicas if r.sidecar is None)
        self.counted: int | None = None
        """The restart marker the plan put on this pod (`reconcile.MarkCounted`)."""
        self.deleting_until: float | None = None
        """While the pod is being deleted: when (monotonic) what is left of it is SIGKILLed."""

    def view(self, name: str, slot: tuple[str, int]) -> podview.PodView:
        """The pod as the operator would see it from the API server."""
        code = self.main.exit_code
        failed = bool(code)
        phase = {None: podview.PHASE_RUNNING, 0: podview.PHASE_SUCCEEDED}.get(code, podview.PHASE_FAILED)
        return podview.PodView(
            name,
            *slot,
            phase=phase,
            terminating=self.deleting_until is not None,
            exit_code=code if failed else None,
            reason=EXIT_REASON if failed else None,
            counted=self.counted,
        )


EXIT_REASON = "Error"
"""The reason a kubelet gives a container that exited with a non-zero code."""


class Launcher:
    """Runs one job as local processes: observes them as pods, plans as the operator does
    (`reconcile.plan`), and executes the plan: Create a pod -> start its processes, Delete -> stop them.

    `status` is what the operator would write into the job's status; each change is also written to
    `logs/status.yaml` in the run directory, and the plan's Events are printed as they come.
    """

    def __init__(self, job: AgentsJob, logdir: Path, out: TextIO = sys.stderr, video: bool = True):
        self.job = job
        self.manifest = job.model_dump(by_alias=True, exclude_none=True, mode="json")
        """The job as the operator reads it from the API server."""
        self.logdir = logdir
        self.out = out
        self.metrics_port = free_port()
        self.replicas = plan(job, logdir, metrics_port=self.metrics_port, video=video)
        self.metrics_url = f"http://{LOOPBACK}:{self.metrics_port}/metrics"
        self.slots = {naming.child_name(job.name, t, i): (t, i) for t, i in job.topology.slots()}
        self.pods: dict[tuple[str, int], ProcessPod] = {}
        self.children: dict[tuple[str, str], podview.ChildView] = {}
        """The pod-less children the plan created (Services, TensorBoard): nothing runs for them here."""
        self.status: dict = {}
        self.desired = reconcile.DesiredCache()
        self.since = time.time()
        """Wall time of the start: files older than this in the run directory are a previous run's."""
        self.failed: Replica | None = None
        """The main process of the pod whose failure ended the job, if one did."""
        self.tracker = localreport.Tracker(job.config.total_steps, out)

    @property
    def restarts(self) -> int:
        return self.status.get("restarts", 0)

    # --- processes ---------------------------------------------------------------------------------------

    def _start(self, replica: Replica) -> None:
        """Start `replica`; only from the thread that lives as long as the launcher (see `sandbox`)."""
        replica.log_path.parent.mkdir(parents=True, exist_ok=True)
        if replica.log_file is None:
            replica.log_file = replica.log_path.open("a", buffering=1)
        replica.attempts += 1
        replica.exit_code = None
        replica.log_file.write(localreport.attempt_line(replica.attempts) + "\n")
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

    def _reap(self, replica: Replica, say: bool = True) -> bool:
        """Whether `replica` has just exited; if so its exit code is recorded (and said), its leftovers killed."""
        if replica.process is None or replica.exit_code is not None:
            return False
        code = replica.process.poll()
        if code is None:
            return False
        replica.exit_code = code if code >= 0 else 128 - code  # a signal, as a container runtime reports it
        _kill_leftovers(replica)
        if say:
            self.tracker.say(f"{replica.name} exited with code {replica.exit_code}")
        return True

    # --- pods ----------------------------------------------------------------------------------------------

    def observe(self) -> list[podview.PodView]:
        """The job's pods as the operator would see them; deleted pods whose processes are gone are dropped."""
        views = []
        for name, slot in self.slots.items():
            pod = self.pods.get(slot)
            if pod is None:
                continue
            for replica in pod.replicas:
                self._reap(replica, say=pod.deleting_until is None)
            if pod.deleting_until is not None:
                if not any(r.running for r in pod.replicas):
                    del self.pods[slot]
                    continue
                if time.monotonic() >= pod.deleting_until:
                    for replica in pod.replicas:
                        self._signal(replica, signal.SIGKILL)
            else:
                self._kubelet(pod)
            views.append(pod.view(name, slot))
        return views

    def _kubelet(self, pod: ProcessPod) -> None:
        """Sidecars stop with the main process, and are restarted in place while it runs (not counted)."""
        for sidecar in pod.replicas:
            if sidecar is pod.main:
                continue
            if pod.main.exit_code is not None:
                self._signal(sidecar, signal.SIGTERM)
            elif sidecar.exit_code is not None and sidecar.restart_policy == "Always":
                self.tracker.say(f"restarting {sidecar.name}")
                self._start(sidecar)

    def _create_pod(self, slot: tuple[str, int]) -> None:
        if slot in self.pods:
            return  # already there, as a 409 would say
        replicas = [r for r in self.replicas if (r.type, r.index) == slot]
        for replica in replicas:  # native sidecars first, as the kubelet starts them
            self._start(replica)
        self.pods[slot] = ProcessPod(replicas)

    def _delete_pod(self, slot: tuple[str, int], grace: int | None) -> None:
        pod = self.pods.get(slot)
        if pod is None or pod.deleting_until is not None:
            return
        grace = STOP_GRACE_SECONDS if grace is None else grace
        for replica in pod.replicas:
            self._signal(replica, signal.SIGTERM if grace else signal.SIGKILL)
        pod.deleting_until = time.monotonic() + grace

    # --- the plan ------------------------------------------------------------------------------------------

    def step(self, now: datetime | None = None) -> reconcile.Plan:
        """Observe, plan as the operator does, execute; the plan (its status is the job's new status)."""
        children = list(self.children.values())
        plan = reconcile.plan(
            {**self.manifest, "status": self.status},
            self.observe(),
            children,
            now=now or datetime.now(UTC),
            cache=self.desired,
            allow_privileged=True,  # no Pod Security here: the processes run as the user who starts them
        )
        if plan.outcome is not None and plan.outcome.pod is not None:
            self.failed = self.pods[self.slots[plan.outcome.pod]].main
        for action in plan.actions:
            self._execute(action)
        for event in plan.events:
            self.tracker.say(f"{event.reason}: {event.message}")
        return plan

    def _execute(self, action: reconcile.Action) -> None:
        match action:
            case reconcile.Create() if action.kind == reconcile.KIND_POD:
                self._create_pod(self.slots[action.name])
            case reconcile.Create():
                self.children[action.kind, action.name] = podview.ChildView(action.kind, action.name)
            case reconcile.Delete(kind=reconcile.KIND_POD, name=name, grace_seconds=grace):
                self._delete_pod(self.slots[name], grace)
            case reconcile.Delete(kind=kind, name=name):
                self.children.pop((kind, name), None)
            case reconcile.MarkCounted(pod=name, restarts=restarts):
                self.pods[self.slots[name]].counted = restarts
            case reconcile.WriteStatus(patch=patch):
                self._write_status(patch)
            case reconcile.DeleteJob():
                pass  # the launcher ends with the job, before its TTL

    def _write_status(self, patch: dict) -> None:
        self.status = {**self.status, **patch}
        for key in [k for k, v in patch.items() if v is None]:
            del self.status[key]
        path = self.logdir / rundir.LOGS / STATUS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.status, sort_keys=False))

    def _progress(self, metrics: dict[str, float] | None) -> None:
        """The chief's metrics on the console, and in the status file's `progress` as the operator writes it."""
        self.tracker.update(metrics)
        progress = chiefmetrics.progress_from_samples(metrics, datetime.now(UTC)) if metrics else None
        old = {k: v for k, v in (self.status.get("progress") or {}).items() if k != "updatedAt"}
        if progress and {k: v for k, v in progress.items() if k != "updatedAt"} != old:
            self._write_status({"progress": progress})

    def outcome(self) -> rules.Outcome | None:
        """How the job ended (Succeeded, Failed, or Suspended, which runs nothing here); None while it runs."""
        return conditions.ended(self.status)

    # --- the job -----------------------------------------------------------------------------------------

    def run(self) -> rules.Outcome:
        """Run the job to its end; the outcome is the condition that ended it."""
        self.since = time.time()
        last_metrics = 0.0
        try:
            while True:
                plan = self.step()
                outcome = self.outcome()
                if outcome is not None:
                    return outcome
                if plan.actions:
                    continue  # what the plan changed is observed at once, as the operator's watch tells it
                if time.monotonic() - last_metrics >= METRICS_SECONDS:
                    last_metrics = time.monotonic()
                    self._progress(scrape.scrape(self.metrics_url))
                time.sleep(POLL_SECONDS)
        finally:
            self._progress(scrape.scrape(self.metrics_url))
            self.stop_all()
            self.tracker.finish(self.logdir, self.since)


STATUS_FILE = "status.yaml"
"""In the run directory's logs: the job's status as the operator would write it."""


def run_local(job: AgentsJob, logdir: Path, video: bool = True, out: TextIO = sys.stderr) -> int:
    """Run `job` here; 0 only when it succeeded. LaunchError when its run directory is unusable, or holds a
    run that `job` may not resume."""
    prepare_logdir(logdir)
    check_resume(job, logdir, video)
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

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcome = launcher.run()
    except KeyboardInterrupt:
        outcome = None
    finally:
        signal.signal(signal.SIGTERM, previous)
    for line in _closing_lines(launcher, outcome):
        print(line, file=out)
    if outcome is None:
        return 130
    return 0 if outcome.succeeded else 1


def _closing_lines(launcher: Launcher, outcome: rules.Outcome | None) -> list[str]:
    """The console's last words on a job: how it ended (None: interrupted), why (the failed replica's own
    error line), what it reached, and where its files are."""
    logdir = launcher.logdir
    if outcome is None:
        lines = ["Interrupted: stopped by the user; every replica was stopped"]
    else:
        lines = [f"{outcome.condition} ({outcome.reason}): {outcome.message}"]
    error = localreport.read_last_error(launcher.failed.log_path) if launcher.failed else None
    if error:
        lines.append(f"  {launcher.failed.name}: {error}")
    summary = launcher.tracker.summary()
    if summary:
        lines.append(f"  {summary}")
    elif not error:  # a failure that says why needs no guess at it
        lines.append("  no progress was reported (the chief's /metrics never answered)")
    lines.append(f"  run directory: {logdir}  (logs and the job's status in {logdir / rundir.LOGS})")
    video, export = logdir / rundir.VIDEO, logdir / exported.DIRECTORY / exported.METADATA
    succeeded = outcome is not None and outcome.succeeded
    if succeeded and rundir.written_since(video, launcher.since):  # not a previous run's
        lines.append(f"  video: {video}")
    if succeeded and rundir.written_since(export, launcher.since):
        lines.append(f"  exported policy: {export.parent}  (agents-operator evaluate --model {export.parent})")
    return lines
