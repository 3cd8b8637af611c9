"""The test's side of a real node: jobs applied with kubectl, pods as the kubelet runs them, containers signalled
through the node's containerd, a volume the test provides, and a readable account of what went wrong.

Nothing here plays the kubelet: every phase, exit code and reason the tests read was reported by the node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from agents_operator import naming
from agents_operator.kube import Kube
from tests.e2e.cluster import jobs_path, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONTAINERD = os.environ.get("AGENTS_NODE_CONTAINERD", "")
CLAIM = "runs"
"""The PersistentVolumeClaim a namespace's jobs keep their run directories on (`Namespace.provide_volume`)."""

__all__ = ["CLAIM", "Namespace", "example", "wait_for"]


def example(name: str) -> dict:
    """One of examples/ as a dict, to change before it is applied."""
    return yaml.safe_load((EXAMPLES / name).read_text())


class Namespace:
    """One Pod Security "restricted" namespace on the node, and what the tests do in it."""

    def __init__(self, kube: Kube, name: str, kubectl: Callable[..., str]):
        self.kube = kube
        self.ns = name
        self._kubectl = kubectl

    def kubectl(self, *args: str) -> str:
        return self._kubectl("--namespace", self.ns, *args)

    def apply(self, manifest: dict) -> None:
        """`kubectl apply -f` of a manifest, as a user applies an example."""
        self._kubectl("--namespace", self.ns, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))

    def job(self, name: str) -> dict:
        return self.kube.get(naming.KIND, self.ns, name) or {}

    def status(self, name: str) -> dict:
        return self.job(name).get("status") or {}

    def state(self, name: str) -> str | None:
        return self.status(name).get("state")

    def condition(self, name: str, type_: str) -> dict:
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == type_), {})

    def pods(self, job: str) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.kube.list("Pod", self.ns, {naming.LABEL_JOB: job})}

    def pod(self, name: str) -> dict:
        return self.kube.get("Pod", self.ns, name) or {}

    def events(self, job: str) -> list[dict]:
        items = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/events").get("items") or []
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == job]

    def wait_state(self, job: str, state: str, timeout: float) -> dict:
        """Wait for `state`; a job that ends otherwise fails at once, with its status and pods."""

        def reached() -> bool:
            now = self.state(job)
            assert now == state or now not in ("Succeeded", "Failed"), f"{job} ended {now}:\n{self.describe(job)}"
            return now == state

        try:
            wait_for(reached, timeout, f"{job} {state}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(job)}") from None
        return self.status(job)

    def wait_running(self, job: str, count: int, timeout: float = 180) -> dict[str, dict]:
        """Wait until `count` pods of `job` run (phase Running, every container ready)."""

        def running() -> dict[str, dict]:
            pods = {n: p for n, p in self.pods(job).items() if _running(p)}
            return pods if len(pods) >= count else {}

        try:
            return wait_for(running, timeout, f"{count} running pods of {job}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(job)}") from None

    def describe(self, job: str) -> str:
        """The job's status, its pods' states and its Events: what a failed test shows."""
        lines = [yaml.safe_dump({"status": self.status(job)}, sort_keys=False)]
        for name, pod in sorted(self.pods(job).items()):
            status = pod.get("status") or {}
            states = {c["name"]: c.get("state") for c in status.get("containerStatuses") or []}
            lines.append(f"pod {name}: {status.get('phase')} {json.dumps(states)}")
        lines += [
            f"event {e.get('reason')} at {e.get('firstTimestamp')} by {e.get('reportingInstance')}: {e.get('message')}"
            for e in sorted(self.events(job), key=lambda e: e.get("firstTimestamp") or "")
        ]
        return "\n".join(lines)

    def provide_volume(self, host_dir: Path, size: str = "1Gi") -> Path:
        """A PersistentVolume on `host_dir` bound to claim CLAIM here; the directory is the UID the pods run as."""
        host_dir.mkdir(parents=True, exist_ok=True)
        os.chown(host_dir, 1000, 1000)
        pv = f"{self.ns}-{CLAIM}"
        self.kube.request(
            "POST",
            "/api/v1/persistentvolumes",
            body={
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv, "labels": {"agents.dev/node-test": self.ns}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "hostPath": {"path": str(host_dir), "type": "Directory"},
                    "claimRef": {"namespace": self.ns, "name": CLAIM},
                },
            },
        )
        self.kube.request(
            "POST",
            f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims",
            body={
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": CLAIM},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": pv,
                    "resources": {"requests": {"storage": size}},
                },
            },
        )
        wait_for(lambda: self._claim_phase() == "Bound", 60, f"claim {CLAIM} Bound")
        return host_dir

    def _claim_phase(self) -> str | None:
        claim = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{CLAIM}")
        return (claim.get("status") or {}).get("phase")

    def signal(self, pod: str, container: str, sig: str = "SIGKILL") -> None:
        """Send `sig` to a container's process from the node, as the kernel's OOM killer or a node agent does."""
        statuses = (self.pod(pod).get("status") or {}).get("containerStatuses") or []
        (cid,) = [c["containerID"].split("://", 1)[1] for c in statuses if c["name"] == container]
        ctr = shutil.which("ctr") or "ctr"
        command = [ctr, "--address", CONTAINERD, "--namespace", "k8s.io", "tasks", "kill", "--signal", sig, cid]
        subprocess.run(command, check=True, capture_output=True, timeout=30)

    def path(self) -> str:
        return jobs_path(self.ns)


def _running(pod: dict) -> bool:
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    return status.get("phase") == "Running" and bool(statuses) and all(c.get("ready") for c in statuses)


def until(check: Callable[[], object], timeout: float, what: str, every: float = 1.0) -> object:
    """`wait_for` at a slower pace, for checks that run kubectl."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)
