"""examples/pendulum.yaml on real pods: `kubectl apply` to `Succeeded`, with the run kept on a volume."""

from __future__ import annotations

import re
import time

import yaml

from agents_operator import exported
from agents_operator.trainer import rundir
from tests.node.node import CLAIM, Namespace, example

PENDULUM_GOAL = -250.0
"""The pendulum preset's goal (its file: mean return >= -250 within 300k steps), the bar `make demo` meets."""
TRAINING_SECONDS = 900


def _columns(ns: Namespace, job: str) -> dict[str, str]:
    """`kubectl get aj JOB` as a user reads it: each printer column by its header, cut where the header puts it
    (an empty column is blank there, not absent)."""
    header, row = ns.kubectl("get", "aj", job).splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], max(len(row), len(header)) + 1]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def _watch(ns: Namespace, job: str, timeout: float) -> tuple[list[dict[str, str]], dict[str, dict], dict[str, str]]:
    """Until the job ends: every `kubectl get aj` row, the last state seen of each pod's trainer container,
    and each replica's `kubectl logs` taken while its pod was there."""
    rows, last_state, logs = [], {}, {}
    deadline = time.monotonic() + timeout
    while ns.state(job) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"{job} did not end in {timeout} s:\n{ns.describe(job)}"
        rows.append(_columns(ns, job))
        for name, pod in ns.pods(job).items():
            for container in (pod.get("status") or {}).get("containerStatuses") or []:
                if container["name"] == "agents" and container.get("state"):
                    last_state[name] = container["state"]
                    if "waiting" not in container["state"]:
                        logs[name] = ns.kubectl("logs", name, "-c", "agents")
        time.sleep(2)
    return rows, last_state, logs


def _ended(ns: Namespace, pod: str, seen: dict, timeout: float = 30.0) -> dict:
    """The state of `pod`'s trainer container once it is terminated. The chief waits for the ps to exit before
    it exits, but the kubelet reports each pod on its own: the job may end before a ps's exit is reported. `seen`
    when the pod is gone."""
    deadline = time.monotonic() + timeout
    state = seen
    while time.monotonic() < deadline:
        statuses = (ns.pod(pod).get("status") or {}).get("containerStatuses") or []
        state = next((c.get("state") for c in statuses if c["name"] == "agents"), None)
        if state is None:
            return seen
        if "terminated" in state:
            return state
        time.sleep(0.5)
    return state


def test_pendulum_example_trains_to_succeeded_on_real_pods(namespace, tmp_path):
    ns = namespace
    volume = ns.provide_volume(tmp_path / "volume")
    job = example("pendulum.yaml")
    job["spec"]["storage"] = {"persistentVolumeClaim": {"claimName": CLAIM}}
    ns.apply(job)
    name = job["metadata"]["name"]

    running = ns.wait_running(name, 3)
    assert set(running) == {f"{name}-ps-0", f"{name}-worker-0", f"{name}-worker-1"}
    rows, last_state, logs = _watch(ns, name, TRAINING_SECONDS)
    status = ns.wait_state(name, "Succeeded", 30)

    steps = [int(r["STEP"]) for r in rows if r.get("STEP", "").isdigit()]
    assert len(set(steps)) >= 2 and steps == sorted(steps), f"Step did not move in kubectl get aj: {rows}"
    assert any(r.get("SCORE") for r in rows), f"no Score in kubectl get aj: {rows}"
    ps = f"{name}-ps-0"
    last_state[ps] = _ended(ns, ps, last_state[ps])
    assert last_state[ps].get("terminated", {}).get("exitCode") == 0, last_state
    for replica in running:
        assert logs.get(replica), f"no kubectl logs of {replica}"

    run = volume / name
    summary = rundir.load_summary(run)
    assert summary and summary["eval_mean_return"] >= PENDULUM_GOAL, summary
    metadata = exported.read_metadata(run / exported.DIRECTORY)
    assert metadata.env_id == "Pendulum-v1", metadata
    assert status["export"]["claimName"] == CLAIM, status
    assert yaml.safe_load((run / rundir.CONFIG_FILE).read_text())["env_id"] == "Pendulum-v1"
    assert list(run.glob(rundir.EVENTS)), sorted(p.name for p in run.iterdir())
