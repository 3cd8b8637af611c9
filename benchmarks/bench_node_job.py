"""examples/pendulum.yaml on the real node against the same manifest under `agents-operator local`, one run each on
the same machine in the same invocation; pod start latency of a 1 ps + 8 workers job; the operator pods' RSS
and CPU over the node's runs. One JSON line.

- node: seconds from `kubectl apply` to every pod Running, to the first progress in status, to `Succeeded`
  (polled every 0.5 s through the API server);
- local: the same three for `agents-operator local` (its status file `logs/status.yaml`, polled as often);
- ratio_*: node / local for each;
- pod_start: created -> Running (the container's startedAt less the pod's creationTimestamp, the API server's
  one-second timestamps) over the 9 pods of a 1 ps + 8 workers job, p50 and p99;
- operator: the operator pods' resident memory (peak and last, MiB, from /proc on this machine: the node is
  this machine) and CPU seconds over both node runs.

Needs the node with the images loaded, and root: `make bench-node` brings them up as `make e2e-node` does
(tools/e2e-node.sh) and runs this instead of the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

from agents_operator import jobstatus, naming
from agents_operator.kube import Kube
from tests.e2e import installs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pendulum.yaml"
POLL = 0.5
RELEASE, RELEASE_NAMESPACE = "agents-bench", "agents-bench-system"


def _kubeconfig() -> str:
    for var in ("AGENTS_NODE_KUBECONFIG", "AGENTS_NODE_IMAGE_TAG"):
        if not os.environ.get(var):
            raise SystemExit(f"bench_node_job: {var} is not set (make e2e-node starts the node and loads the images)")
    return os.environ["AGENTS_NODE_KUBECONFIG"]


def _running(pods: list[dict], count: int) -> bool:
    return len([p for p in pods if (p.get("status") or {}).get("phase") == "Running"]) >= count


def _milestones(read, count: int, timeout: float) -> dict[str, float]:
    """Seconds to: `count` pods running, the first progress, Succeeded; `read()` gives (pods running, status)."""
    started, marks = time.monotonic(), {}
    while "succeeded_s" not in marks:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"bench_node_job: no Succeeded within {timeout} s (reached {sorted(marks)})")
        running, job_status = read()
        now = round(time.monotonic() - started, 1)
        if running >= count:
            marks.setdefault("running_s", now)
        if (job_status.get("progress") or {}).get("globalStep"):
            marks.setdefault("progress_s", now)
        if job_status.get("state") == "Succeeded":
            marks["succeeded_s"] = now
        elif job_status.get("state") == "Failed":
            raise SystemExit(f"bench_node_job: the job failed: {json.dumps(job_status)[:2000]}")
        time.sleep(POLL)
    return marks


def on_node(kube: Kube, kubectl, namespace: str, manifest: dict, pods: int) -> dict[str, float]:
    name = manifest["metadata"]["name"]
    kubectl("--namespace", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))

    def read():
        listed = kube.list("Pod", namespace, {naming.LABEL_JOB: name})
        job = kube.get(naming.KIND, namespace, name) or {}
        return len([p for p in listed if (p.get("status") or {}).get("phase") == "Running"]), job.get("status") or {}

    return _milestones(read, pods, 900)


def on_local(manifest_path: Path, pods: int) -> dict[str, float]:
    logdir = Path(tempfile.mkdtemp(prefix="node-bench-local-"))
    command = [
        str(Path(sys.executable).parent / "agents-operator"),
        "local",
        str(manifest_path),
        "--logdir",
        str(logdir),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = logdir / "logs" / "status.yaml"

    def read():
        try:
            job_status = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            job_status = {}
        return (pods if job_status.get("state") in ("Running", "Succeeded") else 0), job_status

    try:
        return _milestones(read, pods, 900)
    finally:
        process.wait(120)


def pod_start_latency(kube: Kube, kubectl, namespace: str) -> dict[str, float]:
    """1 ps + 8 workers of a short pendulum job: created -> container started, per pod."""
    job = {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": "starts"},
        "spec": {
            "trainer": {"preset": "pendulum", "totalSteps": 65536, "videoEpisodes": 0, "evalEpisodes": 2},
            "replicaSpecs": {"ps": {"replicas": 1}, "worker": {"replicas": 8}},
        },
    }
    kubectl("--namespace", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    deadline = time.monotonic() + 600
    while True:
        pods = kube.list("Pod", namespace, {naming.LABEL_JOB: "starts"})
        started = [_started(p) for p in pods]
        if len(pods) == 9 and all(s is not None for s in started):
            break
        if time.monotonic() > deadline:
            raise SystemExit("bench_node_job: the 9 pods did not all start within 600 s")
        time.sleep(POLL)
    latencies = sorted(started)
    return {
        "pods": len(latencies),
        "p50_s": statistics.median(latencies),
        "p99_s": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
    }


def _started(pod: dict) -> float | None:
    created = jobstatus.parse_time(pod["metadata"].get("creationTimestamp"))
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running") or (container.get("state") or {}).get("terminated")
        if running and running.get("startedAt") and created:
            return (jobstatus.parse_time(running["startedAt"]) - created).total_seconds()
    return None


class OperatorUsage:
    """Samples the operator pods' processes from /proc: their container's task PIDs through the node's ctr."""

    def __init__(self, kube: Kube, install: installs.Install):
        self.kube, self.install = kube, install
        self.peak_mib = self.last_mib = 0.0
        self.cpu_s: dict[int, float] = {}
        self.first_cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> OperatorUsage:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _pids(self) -> list[int]:
        selector = self.install.manifest(self.kube)["spec"]["selector"]["matchLabels"]
        ids = [
            c["containerID"].split("://", 1)[1]
            for p in self.kube.list("Pod", self.install.namespace, selector)
            for c in (p.get("status") or {}).get("containerStatuses") or []
            if c.get("containerID") and (c.get("state") or {}).get("running")
        ]
        ctr = ["ctr", "--address", os.environ.get("AGENTS_NODE_CONTAINERD", ""), "--namespace", "k8s.io"]
        listed = subprocess.run([*ctr, "tasks", "ls"], capture_output=True, text=True, check=False).stdout
        rows = [line.split() for line in listed.splitlines()[1:]]
        return [int(row[1]) for row in rows if len(row) >= 2 and row[0] in ids]

    def _loop(self) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(1.0):
            total = 0.0
            for pid in self._pids():
                try:
                    rss = next(
                        line
                        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("VmRSS")
                    )
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, StopIteration):
                    continue
                total += int(rss.split()[1]) / 1024
                cpu = (int(fields[11]) + int(fields[12])) / ticks
                self.first_cpu.setdefault(pid, cpu)
                self.cpu_s[pid] = cpu
            self.peak_mib = max(self.peak_mib, total)
            self.last_mib = total

    def report(self) -> dict[str, float]:
        cpu = sum(self.cpu_s[pid] - self.first_cpu[pid] for pid in self.cpu_s)
        return {"rss_peak_mib": round(self.peak_mib, 1), "rss_last_mib": round(self.last_mib, 1),
                "cpu_s": round(cpu, 2), "pods": len(self.cpu_s)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    kubeconfig = _kubeconfig()
    home = Path(tempfile.mkdtemp(prefix="node-bench-tools-"))

    def kubectl(*args: str, stdin: str | None = None) -> str:
        return installs.run_tool("kubectl", *args, kubeconfig=kubeconfig, home=home, stdin=stdin)

    kube = Kube.connect(kubeconfig=kubeconfig)
    sets = [f"image.tag={os.environ['AGENTS_NODE_IMAGE_TAG']}", "image.pullPolicy=Never", "replicaCount=2",
            "peering.enabled=true"]  # fmt: skip
    install = installs.helm_install(RELEASE, RELEASE_NAMESPACE, kubeconfig, home, *sets)
    kubectl("--namespace", RELEASE_NAMESPACE, "rollout", "status", f"deployment/{install.deployment}", "--timeout=180s")
    namespace = f"node-bench-{uuid.uuid4().hex[:6]}"
    kube.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    try:
        manifest = yaml.safe_load(EXAMPLE.read_text())
        with OperatorUsage(kube, install) as usage:
            node = on_node(kube, kubectl, namespace, manifest, 3)
            starts = pod_start_latency(kube, kubectl, namespace)
        local = on_local(EXAMPLE, 3)
    finally:
        installs.delete_namespace(kube, namespace)
        installs.helm_uninstall(RELEASE, RELEASE_NAMESPACE, kubeconfig, home)
        installs.delete_namespace(kube, RELEASE_NAMESPACE)
    ratios = {f"ratio_{k}": round(node[k] / local[k], 2) for k in node if local.get(k)}
    print(json.dumps({"job": "examples/pendulum.yaml", "node": node, "local": local, **ratios,
                      "pod_start": starts, "operator": usage.report()}))  # fmt: skip


if __name__ == "__main__":
    main()
