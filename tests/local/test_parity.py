"""One lifecycle, two executors: the same scenario through the operator's plan over an in-memory cluster
(`tests/world.py`) and through `local` over real processes gives the same sequence of statuses."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from agents_operator import local, naming
from agents_operator.api import parse_job
from tests.world import World

# Every replica waits until the test writes its exit code into a file named after it, then exits with it.
REPLICA = [
    "sh",
    "-c",
    'f="$EXITS/$AGENTS_REPLICA_TYPE-$AGENTS_REPLICA_INDEX"; '
    'while [ ! -e "$f" ]; do sleep 0.05; done; exit "$(cat "$f")"',
]
TIMES = ("lastTransitionTime", "startTime", "completionTime")


def manifest(restart: str, backoff: int, success: str) -> dict:
    template = {"spec": {"containers": [{"name": "agents", "command": REPLICA}]}}
    replica = {"restartPolicy": restart, "template": template}
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": "pj", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {
            "replicaSpecs": {"ps": {"replicas": 1, **replica}, "worker": {"replicas": 2, **replica}},
            "runPolicy": {"backoffLimit": backoff},
            "successPolicy": success,
        },
    }


def comparable(job_status: dict) -> dict:
    out = {k: v for k, v in job_status.items() if k not in TIMES}
    out["conditions"] = [{k: v for k, v in c.items() if k not in TIMES} for c in job_status.get("conditions", [])]
    return out


class Operator:
    """The operator's plans applied to an in-memory cluster, whose pods run as soon as they are created."""

    def __init__(self, job: dict):
        self.world = World(job)

    def settle(self) -> list[dict]:
        seen = []
        while self.world.job is not None:
            self.world.run_all()
            plan = self.world.step()
            seen.append(comparable(plan.status))
            if not plan.actions:
                return seen
        return seen

    def exit(self, replica: str, code: int) -> None:
        phase = "Succeeded" if code == 0 else "Failed"
        self.world.set_phase(f"pj-{replica}", phase, exit_code=code)


class Local:
    """`local` over processes, stepped by hand: each exit happens before the next step observes it."""

    def __init__(self, job: dict, tmp_path: Path):
        self.exits = tmp_path / "exits"
        self.exits.mkdir()
        self.launcher = local.Launcher(parse_job(job), tmp_path / "run", out=sys.stderr)
        for replica in self.launcher.replicas:
            replica.env["EXITS"] = str(self.exits)

    def settle(self) -> list[dict]:
        seen = []
        while True:
            plan = self.launcher.step()
            seen.append(comparable(plan.status))
            if not plan.actions:
                return seen

    def exit(self, replica: str, code: int) -> None:
        (self.exits / replica).write_text(str(code))
        process = next(r.process for r in self.launcher.replicas if r.name == replica)
        process.wait()
        (self.exits / replica).unlink()  # its replacement runs until told


def run(executor, events: list[tuple[str, int]]) -> list[dict]:
    """Statuses after every plan, each repeated one written once: the job starts, then each event in turn."""
    seen = executor.settle()
    for replica, code in events:
        executor.exit(replica, code)
        seen += executor.settle()
    return [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]


SCENARIOS = {
    "replaced, then over the backoff limit": (
        ("OnFailure", 1, "ChiefWorker"),
        [("worker-1", 2), ("worker-1", 137)],
        "BackoffLimitExceeded",
    ),
    "signals retried, permanent codes not": (
        ("ExitCode", 3, "ChiefWorker"),
        [("worker-1", 143), ("worker-0", 3)],
        "PermanentExitCode",
    ),
    "every worker done": (
        ("ExitCode", 3, "AllWorkers"),
        [("worker-1", 0), ("ps-0", 137), ("worker-0", 0)],
        "AllWorkersSucceeded",
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_local_and_the_operator_write_the_same_statuses(scenario, tmp_path):
    spec, events, end = SCENARIOS[scenario]
    job = manifest(*spec)
    expected = run(Operator(copy.deepcopy(job)), events)
    launcher = Local(copy.deepcopy(job), tmp_path)
    try:
        seen = run(launcher, events)
    finally:
        launcher.launcher.stop_all(grace=1)
    assert expected[-1]["conditions"][-1]["reason"] == end
    assert seen == expected
