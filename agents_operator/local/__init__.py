"""Run an AgentsJob on this machine: every replica as a local process (`agents-operator local`).

Each process runs the launch that `render` gave its container (`render.RenderedPod`), localised to this
machine: its peers and env servers on free localhost ports, the run directory a local folder, the launcher's
own trainer settings. The lifecycle is the operator's own: the launcher observes its processes as pods, plans
with `reconcile.plan` and executes the plan over processes.

- `processes`: the job's containers as commands and environments; the run directory's checks;
- `kubelet`: a pod's processes started, restarted (sidecars), stopped, reaped and seen as a pod;
- `launcher`: the plan executed over them, the status written, `run_local`;
- `scaling`: `agents-operator scale`, a new worker count for the elastic job a launcher runs;
- `console`: what a person reads: progress, the first and the last lines;
- `sandbox`: a network namespace of the job's own, and no replica outliving the launcher.

Everything a replica serves is for this machine only: its /metrics and env servers listen on loopback
(`tfconfig.BIND_HOST_VAR`), and the CLI first moves the launcher into a network namespace of its own
(`sandbox`), since TensorFlow's servers listen on every interface. Replicas are SIGKILLed by the kernel
when the launcher dies, however it dies.
"""

from agents_operator.local.kubelet import STOP_GRACE_SECONDS
from agents_operator.local.launcher import STATUS_FILE, Launcher, run_local
from agents_operator.local.processes import LOOPBACK, LaunchError, Replica, check_resume, plan, prepare_logdir

__all__ = [
    "LOOPBACK",
    "STATUS_FILE",
    "STOP_GRACE_SECONDS",
    "LaunchError",
    "Launcher",
    "Replica",
    "check_resume",
    "plan",
    "prepare_logdir",
    "run_local",
]
