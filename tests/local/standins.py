"""Stand-in replicas for the local launcher's tests: jobs whose containers run plain commands (no TensorFlow),
and how to find what a launcher started and whether it is still alive."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from agents_operator import local
from agents_operator.api import parse_job

PY = sys.executable


def job(
    worker_cmd,
    ps_cmd=("sleep", "60"),
    workers=2,
    worker_policy="OnFailure",
    backoff=3,
    success="ChiefWorker",
    elastic=None,
):
    def template(cmd):
        return {"spec": {"containers": [{"name": "agents", "command": list(cmd)}]}}

    spec = {
        "replicaSpecs": {
            "ps": {"replicas": 1, "template": template(ps_cmd)},
            "worker": {"replicas": workers, "restartPolicy": worker_policy, "template": template(worker_cmd)},
        },
        "runPolicy": {"backoffLimit": backoff},
        "successPolicy": success,
    }
    if elastic is not None:
        spec |= {"elastic": elastic, "trainer": {"mode": "async"}}
    return parse_job(
        {"apiVersion": "agents.dev/v1alpha1", "kind": "AgentsJob", "metadata": {"name": "t"}, "spec": spec}
    )


def script(body: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(body)]


def run(j, tmp_path):
    launcher = local.Launcher(j, tmp_path, out=sys.stderr)
    return launcher, launcher.run()


def descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,sid="], capture_output=True, text=True).stdout
    rows = [tuple(map(int, line.split())) for line in out.splitlines()]
    found, frontier = [], {pid}
    while frontier:
        children = [p for p, pp, _ in rows if pp in frontier]
        found += children
        frontier = set(children)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")
