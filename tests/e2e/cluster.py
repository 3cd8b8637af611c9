"""The test's side of a real cluster: create jobs, read them back, and play the kubelet for their pods."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agents_operator import api, naming
from agents_operator.kube import Kube
from tests.world import make_job

MERGE = "application/merge-patch+json"
NOWHERE = {"agents.dev/e2e": "no-such-node"}
"""A node selector no node matches: no kubelet (of a real cluster) ever runs the tests' pods."""


def jobs_path(namespace: str) -> str:
    return f"/apis/{naming.GROUP}/{naming.VERSION}/namespaces/{namespace}/{naming.PLURAL}"


def manifest(name: str = "pj", **kwargs) -> dict:
    """A job of `world.make_job` as a user would write it: no namespace or uid, pods pinned nowhere."""
    job = make_job(name, uid=None, **kwargs)
    job["metadata"] = {"name": name}
    for replica in job["spec"]["replicaSpecs"].values():
        replica["template"] = {"spec": {"nodeSelector": NOWHERE, "containers": [{"name": "agents"}]}}
    environments = job["spec"].get("environments") or {}
    if environments.get("placement") == "remote":
        server = environments.setdefault("server", {})
        server["template"] = {"spec": {"nodeSelector": NOWHERE, "containers": [{"name": "env-server"}]}}
    return job


def skipped_module(reason: str) -> type[pytest.Module]:
    """A pytest Module class that skips the whole module with `reason`: a suite whose cluster is not there
    (pytest folds the same skip of every module into one line of its summary)."""

    class Skipped(pytest.Module):
        def _getobj(self):
            pytest.skip(reason, allow_module_level=True)

    return Skipped


class Cluster:
    """One namespace of the cluster, as the tests see and drive it."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube = kube
        self.ns = namespace

    def create_job(self, name: str = "pj", **kwargs) -> dict:
        return self.kube.request("POST", jobs_path(self.ns), body=manifest(name, **kwargs))

    def job(self, name: str = "pj") -> dict | None:
        return self.kube.get(naming.KIND, self.ns, name)

    def status(self, name: str = "pj") -> dict:
        return (self.job(name) or {}).get("status") or {}

    def state(self, name: str = "pj") -> str | None:
        return self.status(name).get("state")

    def pods(self, job: str = "pj") -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.kube.list("Pod", self.ns, {naming.LABEL_JOB: job})}

    def live_pods(self, job: str = "pj") -> set[str]:
        return {n for n, p in self.pods(job).items() if not p["metadata"].get("deletionTimestamp")}

    def services(self, job: str = "pj") -> set[str]:
        return {s["metadata"]["name"] for s in self.kube.list("Service", self.ns, {naming.LABEL_JOB: job})}

    def set_phase(self, pod: str, phase: str, exit_code: int | None = None) -> None:
        """What a kubelet reports: phase and, for a finished container, its exit code."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status: dict = {"phase": phase}
        if phase in ("Running", "Succeeded", "Failed"):
            state = (
                {"running": {"startedAt": now}}
                if phase == "Running"
                else {
                    "terminated": {
                        "exitCode": exit_code or 0,
                        "reason": "Error" if exit_code else "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
            )
            status["containerStatuses"] = [
                {
                    "name": "agents",
                    "image": "agents",
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "state": state,
                }
            ]
        self.kube.request(
            "PATCH", f"/api/v1/namespaces/{self.ns}/pods/{pod}/status", body={"status": status}, content_type=MERGE
        )

    def run_all(self, job: str = "pj") -> None:
        for name, pod in self.pods(job).items():
            if (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                self.set_phase(name, "Running")

    def started(self, name: str = "pj", **kwargs) -> None:
        """Create a job, wait for all its pods and report them Running; returns once the job is Running."""
        self.create_job(name, **kwargs)
        expected = len(api.parse_job(manifest(name, **kwargs)).topology.slots())
        wait_for(lambda: len(self.live_pods(name)) == expected, 60, f"{expected} pods")
        self.run_all(name)
        wait_for(lambda: self.state(name) == "Running", 60, "Running")

    def succeeds(self, name: str = "pj") -> None:
        """The whole lifecycle of a 1 ps + 2 worker job: created, Running, Succeeded, cleaned up."""
        self.started(name)
        self.set_phase(f"{name}-worker-0", "Succeeded", 0)
        wait_for(lambda: self.state(name) == "Succeeded", 60, "Succeeded")
        wait_for(lambda: self.live_pods(name) == {f"{name}-worker-0"} and not self.services(name), 60, "cleanup")

    def events(self, reason: str) -> list[dict]:
        items = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/events").get("items") or []
        return [e for e in items if e.get("reason") == reason]


def wait_for(check: Callable[[], object], timeout: float = 30, what: str = "") -> object:
    """Poll `check` until it returns something true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(0.2)
