"""Operator load: N AgentsJobs created at once; how fast their children exist and their status follows pods.

    python benchmarks/operator_load.py                 # against the cluster in $KUBECONFIG
    python benchmarks/operator_load.py --kmock         # against an in-process emulated API server (kmock)

Creates N jobs (default 100, 1 ps + 4 workers each) in a fresh namespace at once, with the operator running
as a subprocess (`agents-operator run -n NS`), and reports:
- time from creating the jobs until all children of a job exist (p50, p99 over jobs);
- time from a pod phase change (all of a job's pods set Running, as a kubelet would) to the job's status
  saying Running (p50, p99);
- the operator's peak resident memory (VmHWM of the subprocess).
Pods are pinned to a node that does not exist, so no kubelet runs them; the benchmark patches their status.
kmock serves every request by scanning all objects it holds, so its figures are a lower bound on what the
operator can do, not a cluster's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents_operator import naming  # noqa: E402
from agents_operator.kube import ApiError, Kube  # noqa: E402

MERGE = "application/merge-patch+json"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def job_manifest(name: str, workers: int) -> dict:
    template = {"spec": {"nodeSelector": {"agents.dev/bench": "no-such-node"}, "containers": [{"name": "agents"}]}}
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": name},
        "spec": {
            "trainer": {"preset": "pendulum"},
            "replicaSpecs": {
                "ps": {"replicas": 1, "template": template},
                "worker": {"replicas": workers, "template": template},
            },
        },
    }


def start_kmock() -> tuple[str, threading.Event]:
    """An emulated API server in a thread; returns its URL and the flag that stops it."""
    import kmock

    class Emulator(kmock.KubernetesEmulator):
        """kmock plus what every real API server gives a new object: a uid and a resourceVersion."""

        async def _handle(self, request):  # type: ignore[override]
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                meta = request.data.setdefault("metadata", {})
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("resourceVersion", "1")
            return await super()._handle(request)

    url: list[str] = []
    ready, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        async with Emulator() as server, kmock.Server(server):
            for resource, kind in (
                (f"{naming.GROUP}/{naming.VERSION}/{naming.PLURAL}", naming.KIND),
                ("v1/pods", "Pod"),
                ("v1/services", "Service"),
                ("apps/v1/deployments", "Deployment"),
                ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
                ("v1/events", "Event"),
            ):
                server.resources[resource] = kmock.ResourceInfo(
                    kind=kind, namespaced=True, verbs={"list", "watch", "get", "create", "patch", "delete"}
                )
            server.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs={"list"})
            server.resources[CRD_PATH.removeprefix("/apis/")] = kmock.ResourceInfo(
                kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch"}
            )
            url.append(str(server.url))
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.2)

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True, name="kmock").start()
    assert ready.wait(10)
    return url[0], stop


def kubeconfig_for(url: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "anonymous", "user": {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "anonymous"}}],
        "current-context": "kmock",
    }
    fd, path = tempfile.mkstemp(suffix=".kubeconfig")
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f)
    return path


LIVENESS_PORT = 18080
METRICS_PORT = 18081


def operator_metrics() -> dict[str, float]:
    import urllib.request

    from agents_operator.status import parse_metrics

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5) as response:
            return parse_metrics(response.read().decode())
    except OSError:
        return {}


def wait_alive(operator: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until the operator's liveness endpoint answers (kopf serves it once it runs)."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if operator.poll() is not None:
            raise RuntimeError(f"the operator exited with {operator.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{LIVENESS_PORT}/healthz", timeout=1) as response:
                if response.status == 200:
                    time.sleep(1.0)  # watches start right after
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the operator did not become alive")


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kmock", action="store_true", help="run against an in-process emulated API server")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    # SIGTERM (e.g. from `timeout`) unwinds like an exception: the operator subprocess is always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    poll = 1.0 if args.kmock else 0.2  # kmock serialises every object on each list: poll it gently

    stop_kmock = None
    if args.kmock:
        url, stop_kmock = start_kmock()
        kubeconfig = kubeconfig_for(url)
        all_namespaces = True  # kopf cannot follow namespaces on kmock
    else:
        kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        all_namespaces = False
    kube = Kube.connect(kubeconfig=kubeconfig)
    namespace = f"agents-bench-{uuid.uuid4().hex[:6]}"
    if not args.kmock:
        kube.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        crd = yaml.safe_load((ROOT / "crds" / "agentsjob.yaml").read_text())
        try:
            kube.request("POST", CRD_PATH, body=crd)
        except ApiError as err:
            if err.status != 409:
                raise

    scope = ["-A"] if all_namespaces else ["-n", namespace]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="operator-", delete=False)  # noqa: SIM115
    operator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents_operator.cli",
            "run",
            *scope,
            "--kubeconfig",
            kubeconfig,
            "--progress-interval",
            "3600",
            "--liveness",
            f"http://127.0.0.1:{LIVENESS_PORT}/healthz",
            "--metrics-port",
            str(METRICS_PORT),
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    peak = None
    samples: dict[str, float] = {}
    try:
        wait_alive(operator)
        names = [f"load-{i:04d}" for i in range(args.jobs)]
        expected = {
            n: {naming.child_name(n, "ps", 0)} | {naming.child_name(n, "worker", i) for i in range(args.workers)}
            for n in names
        }
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            for job in names:
                manifest = job_manifest(job, args.workers)
                manifest["metadata"]["namespace"] = namespace
                pool.submit(
                    kube.request,
                    "POST",
                    f"/apis/{naming.GROUP}/{naming.VERSION}/namespaces/{namespace}/{naming.PLURAL}",
                    body=manifest,
                )
        ready_at: dict[str, float] = {}
        deadline = started + args.timeout
        while len(ready_at) < len(names) and time.monotonic() < deadline:
            pods: dict[str, set[str]] = {}
            for pod in kube.list("Pod", namespace):
                job = (pod["metadata"].get("labels") or {}).get(naming.LABEL_JOB)
                pods.setdefault(job, set()).add(pod["metadata"]["name"])
            services = {s["metadata"]["name"] for s in kube.list("Service", namespace)}
            now = time.monotonic()
            for job in names:
                if job not in ready_at and expected[job] <= pods.get(job, set()) and expected[job] <= services:
                    ready_at[job] = now - started
            time.sleep(poll)
        children = list(ready_at.values())

        # Status latency: a sample of jobs, all pods set Running at once, until status says Running.
        sample = names[: min(20, len(names))]
        latencies = []
        for job in sample:
            t0 = time.monotonic()
            for pod in sorted(expected[job]):
                kube.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
                    body={"status": {"phase": "Running"}},
                    content_type=MERGE,
                )
            while time.monotonic() - t0 < 60:
                job_obj = kube.get(naming.KIND, namespace, job) or {}
                if (job_obj.get("status") or {}).get("state") == "Running":
                    latencies.append(time.monotonic() - t0)
                    break
                time.sleep(0.05)
        peak = peak_rss_mib(operator.pid)
        samples = operator_metrics()
    finally:
        operator.terminate()
        try:
            operator.wait(20)
        except subprocess.TimeoutExpired:
            operator.kill()
        if not args.kmock:
            kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
        kube.close()
        if stop_kmock:
            stop_kmock.set()

    result = {
        "api_server": "kmock" if args.kmock else "cluster",
        "jobs": args.jobs,
        "pods_per_job": args.workers + 1,
        "jobs_with_all_children": len(children),
        "children_ready_p50_s": round(percentile(children, 0.5), 3),
        "children_ready_p99_s": round(percentile(children, 0.99), 3),
        "status_latency_p50_s": round(percentile(latencies, 0.5), 3),
        "status_latency_p99_s": round(percentile(latencies, 0.99), 3),
        "status_latency_samples": len(latencies),
        "operator_peak_rss_mib": round(peak, 1) if peak else None,
        "reconciles": int(samples.get("agents_operator_reconcile_seconds_count", 0)),
        "reconcile_mean_s": round(
            samples.get("agents_operator_reconcile_seconds_sum", 0)
            / max(1, samples.get("agents_operator_reconcile_seconds_count", 0)),
            4,
        ),
        "operator_log": log.name,
    }
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0 if len(children) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
