"""The kubelet's part of a local run: a pod's containers as processes, started, signalled, reaped, and seen as
the operator sees a pod (`podview.PodView`).

A replica's process leads a process group of its own (so that a Ctrl-C reaches only the launcher, which
stops every group itself) and dies with the launcher (`sandbox.die_with_parent`). Replicas are started from
the launcher's main thread only: the kernel's parent-death signal fires when the thread that forked ends.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from collections.abc import Callable

from agents_operator import podview
from agents_operator.local import sandbox
from agents_operator.local.console import attempt_line
from agents_operator.local.processes import Replica

STOP_GRACE_SECONDS = 10.0
"""How long a stopped replica may take to exit after SIGTERM before it is SIGKILLed (a pod's default grace)."""
EXIT_REASON = "Error"
"""The reason a kubelet gives a container that exited with a non-zero code."""

Say = Callable[[str], None]


def start(replica: Replica) -> None:
    """Start `replica`, its log opened for appending after a line that opens this attempt."""
    replica.log_path.parent.mkdir(parents=True, exist_ok=True)
    if replica.log_file is None:
        replica.log_file = replica.log_path.open("a", buffering=1)
    replica.attempts += 1
    replica.exit_code = None
    replica.log_file.write(attempt_line(replica.attempts) + "\n")
    replica.process = subprocess.Popen(
        replica.argv,
        env={**os.environ, **replica.env},
        stdout=replica.log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches the launcher only; it stops every group itself
        preexec_fn=functools.partial(sandbox.die_with_parent, os.getpid()) if sandbox.LINUX else None,
    )


def send(replica: Replica, sig: int) -> None:
    """`sig` to the process group of a running replica."""
    if replica.running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(replica.process.pid, sig)


def terminate(replica: Replica) -> None:
    """SIGTERM to a running replica's own process, as a container runtime sends it to the container's first
    process only: its children (a worker's environment processes) go on until it has ended, so that a worker
    told to leave can finish its iteration; what is left of the group is SIGKILLed once it has exited."""
    if replica.running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(replica.process.pid, signal.SIGTERM)


def kill_leftovers(replica: Replica) -> None:
    """SIGKILL what is left of the process group of a replica whose leader has just been reaped.

    Env subprocesses or anything the replica started may outlive it, as a pod's processes do not. This runs
    at once: while a member of the group lives, its id cannot be given to a new process, but once none does,
    the id is free, and a killpg minutes later could hit a stranger that now leads a group of that number.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(replica.process.pid, signal.SIGKILL)


def reap(replica: Replica) -> bool:
    """Whether `replica` has just exited; if so its exit code is recorded and its leftovers killed."""
    if replica.process is None or replica.exit_code is not None:
        return False
    code = replica.process.poll()
    if code is None:
        return False
    replica.exit_code = code if code >= 0 else 128 - code  # a signal, as a container runtime reports it
    kill_leftovers(replica)
    return True


def stop_all(replicas: list[Replica], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM every replica (`terminate`), then SIGKILL what is left after `grace` seconds; logs closed."""
    for replica in replicas:
        terminate(replica)
    deadline = time.monotonic() + grace
    while any(r.running for r in replicas) and time.monotonic() < deadline:
        time.sleep(0.1)
    for replica in replicas:
        if replica.running:
            send(replica, signal.SIGKILL)
            replica.process.wait()
        if replica.process is not None and replica.exit_code is None:  # ended during this stop
            kill_leftovers(replica)
    for replica in replicas:
        if replica.log_file is not None:
            replica.log_file.close()
            replica.log_file = None


class ProcessPod:
    """One pod of the job as local processes: its main container and native sidecars, as `plan` built them.

    As the kubelet does: sidecars start first, a sidecar that dies while the main process runs is restarted in
    place (`Replica.restart_policy` Always), sidecars stop once the main process has ended, and the pod's phase
    is its main process's state.
    """

    def __init__(self, replicas: list[Replica]):
        self.replicas = replicas
        self.main = next(r for r in replicas if r.sidecar is None)
        self.counted: int | None = None
        """The restart marker the plan put on this pod (`reconcile.MarkCounted`)."""
        self.deleting_until: float | None = None
        """While the pod is being deleted: when (monotonic) what is left of it is SIGKILLed."""
        for replica in replicas:  # native sidecars first, as the kubelet starts them
            start(replica)

    def delete(self, grace: float) -> None:
        """SIGTERM (`terminate`; SIGKILL when `grace` is 0) every process; what is left after `grace` s is
        SIGKILLed."""
        if self.deleting_until is not None:
            return
        for replica in self.replicas:
            if grace:
                terminate(replica)
            else:
                send(replica, signal.SIGKILL)
        self.deleting_until = time.monotonic() + grace

    def tend(self, say: Say) -> bool:
        """Reap, restart sidecars, finish a deletion; False once a deleted pod has no process left."""
        for replica in self.replicas:
            if reap(replica) and self.deleting_until is None:
                say(f"{replica.name} exited with code {replica.exit_code}")
        if self.deleting_until is not None:
            if not any(r.running for r in self.replicas):
                return False
            if time.monotonic() >= self.deleting_until:
                for replica in self.replicas:
                    send(replica, signal.SIGKILL)
            return True
        for sidecar in self.replicas:
            if sidecar is self.main:
                continue
            if self.main.exit_code is not None:
                send(sidecar, signal.SIGTERM)
            elif sidecar.exit_code is not None and sidecar.restart_policy == "Always":
                say(f"restarting {sidecar.name}")
                start(sidecar)
        return True

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
