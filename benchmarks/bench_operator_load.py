"""Operator load on a real API server: 100 AgentsJobs created at once; prints one JSON line.

    python benchmarks/bench_operator_load.py                 # the cluster in $KUBECONFIG (default ~/.kube/config)
    python benchmarks/bench_operator_load.py --jobs 20       # a smaller burst

The cluster needs the CRD (`kubectl apply --server-side -f crds/agentsjob.yaml`) and the
`agents-operator` command next to this Python.

Two phases, each in a namespace of its own (deleted at the end, and waited for):

1. bare client, the baseline: the jobs are created with `--concurrency` client threads and, as each job
   exists, the objects the operator would create for it (`render.children`: NetworkPolicy, Services, Pods,
   owned by that job) are created directly, on as many threads as the operator's own API client
   (`kube.POOL_THREADS`). No operator runs, so this is the API server's own limit for the same objects.
2. operator: `agents-operator run --namespace NS --metrics-port PORT` as a subprocess, default flags
   otherwise. After a warm-up job (which also shows that its watches are up) the same jobs are created the
   same way. Once the operator's backlog is done, the benchmark plays the kubelet: for every job
   (`--concurrency` at a time) it patches the job's pods to Running through pods/status, one after the
   other. Last, `--single` more jobs are created one at a time, each once the one before has its children.

The figures (seconds; times of objects come from watch events, nothing is polled):
- `children_p50_s/p99_s`: from a job's creation (its POST answered) until all its children exist;
- `all_children_s`: from sending the first job's POST until every job's children exist;
  `ratio_all_children` is the operator's over the bare client's;
- `settled_s`: from the first POST until the operator's reconcile count stopped rising (1 s resolution);
- `status_running_p50_s/p99_s`: from sending the patch that makes the last of a job's pods Running until the
  job's status says Running; `all_running_s`: from the first patch until every job says so;
- `single_children_p50_s`: create->children of the jobs created one at a time (no burst);
- `peak_rss_mib`: the operator's VmHWM; and, counted from the end of the warm-up, once the burst has
  settled and at the end: `cpu_s` (its user+system CPU) and `reconciles`, `reconcile_mean_s`,
  `reconcile_errors` (its /metrics).
Pods are pinned to a node that does not exist, so on a cluster with nodes nothing runs them either.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from agents_operator import api, naming, render
from agents_operator.kube import MERGE_PATCH, POOL_THREADS, ApiError, Kube, path

CHILD_KINDS = ("Pod", "Service", "NetworkPolicy")
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
WARMUP = "warmup"


def percentile(values: list[float], q: float) -> float | None:
    values = sorted(values)
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))], 3)


def job_manifest(name: str, namespace: str, workers: int) -> dict:
    template = {"spec": {"nodeSelector": {"agents.dev/bench": "no-such-node"}, "containers": [{"name": "agents"}]}}
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "trainer": {"preset": "pendulum"},
            "replicaSpecs": {
                "ps": {"replicas": 1, "template": template},
                "worker": {"replicas": workers, "template": template},
            },
        },
    }


def rendered_children(manifest: dict) -> list[dict]:
    """What the operator creates for the job, owned by a placeholder uid (`own` puts the real one in)."""
    with_uid = {**manifest, "metadata": {**manifest["metadata"], "uid": PLACEHOLDER_UID}}
    return render.children(api.parse_job(with_uid))


def own(children: list[dict], uid: str) -> None:
    for child in children:
        for owner in child["metadata"].get("ownerReferences") or []:
            owner["uid"] = uid


class Watch:
    """Watches one kind in a namespace on a thread; remembers when each object first met `when`.

    A stream the server ends is opened again from the last resourceVersion seen (from scratch after a 410):
    objects already seen keep their first time.
    """

    def __init__(self, kube: Kube, kind: str, namespace: str, when: Callable[[dict], bool] = lambda _: True):
        self.kube, self.kind, self.namespace, self.when = kube, kind, namespace, when
        self.seen: dict[str, float] = {}
        self.changed = threading.Condition()
        self.closed = False
        self.response = self._open(None)
        threading.Thread(target=self._read, daemon=True, name=f"watch {kind}").start()

    def _open(self, resource_version: str | None) -> Any:
        query = [("watch", "true"), ("allowWatchBookmarks", "true")]
        query += [("resourceVersion", resource_version)] if resource_version else []
        method, url, headers, _, _ = self.kube.api.param_serialize(
            method="GET",
            resource_path=path(self.kind, self.namespace),
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return self.kube.api.call_api(method, url, headers, _request_timeout=(10, None)).response

    def _read(self) -> None:
        resource_version = None
        while not self.closed:
            try:
                for line in self.response:
                    resource_version = self._event(json.loads(line), resource_version)
            except Exception:  # shut down under us at the end, or the server went away
                time.sleep(0.2)
            with contextlib.suppress(Exception):  # a failed open is retried by the loop
                if not self.closed:
                    self.response = self._open(resource_version)

    def _event(self, event: dict, resource_version: str | None) -> str | None:
        """The resourceVersion to resume from after this event."""
        obj, now = event["object"], time.monotonic()
        if event["type"] == "ERROR":
            return None  # 410 Gone: start from scratch
        name = obj["metadata"].get("name")
        if event["type"] in ("ADDED", "MODIFIED") and name not in self.seen and self.when(obj):
            with self.changed:
                self.seen[name] = now
                self.changed.notify_all()
        return obj["metadata"].get("resourceVersion") or resource_version

    def wait(self, names: set[str], deadline: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: names <= self.seen.keys(), max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(RuntimeError):  # a stream just ended has nothing to unblock
            self.response.shutdown()  # unblocks the reading thread


class Children:
    """Watches of the children of jobs in a namespace: when all of a job's children exist."""

    def __init__(self, kube: Kube, namespace: str):
        self.watches = {kind: Watch(kube, kind, namespace) for kind in CHILD_KINDS}

    def ready_at(self, children: list[dict]) -> float | None:
        times = [self.watches[c["kind"]].seen.get(c["metadata"]["name"]) for c in children]
        return None if None in times else max(times)

    def wait(self, children: list[dict], deadline: float) -> bool:
        return all(
            self.watches[kind].wait({c["metadata"]["name"] for c in children if c["kind"] == kind}, deadline)
            for kind in CHILD_KINDS
        )

    def close(self) -> None:
        for watch in self.watches.values():
            watch.close()


def create_jobs(
    kube: Kube, manifests: list[dict], concurrency: int, then: Callable[[dict], None] | None = None
) -> dict[str, float]:
    """POST the jobs on `concurrency` threads; when each was answered; `then(created job)` right after."""
    created: dict[str, float] = {}

    def create(manifest: dict) -> None:
        job = kube.request("POST", path(naming.KIND, manifest["metadata"]["namespace"]), body=manifest)
        created[manifest["metadata"]["name"]] = time.monotonic()
        if then:
            then(job)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, manifests))
    return created


def children_figures(started: float, created: dict[str, float], ready: dict[str, float | None]) -> dict:
    done = {job: at for job, at in ready.items() if at is not None}
    per_job = [done[job] - created[job] for job in done]
    return {
        "jobs_with_all_children": len(done),
        "children_p50_s": percentile(per_job, 0.5),
        "children_p99_s": percentile(per_job, 0.99),
        "all_children_s": round(max(done.values()) - started, 3) if len(done) == len(ready) else None,
    }


def bare_client(kube: Kube, namespace: str, manifests: list[dict], args: argparse.Namespace) -> dict:
    """Phase 1: the jobs and their rendered children, created by this process alone."""
    children = {m["metadata"]["name"]: rendered_children(m) for m in manifests}
    watch = Children(kube, namespace)
    pool = ThreadPoolExecutor(POOL_THREADS)
    futures = []

    def create_children(job: dict) -> None:
        objs = children[job["metadata"]["name"]]
        own(objs, job["metadata"]["uid"])
        futures.extend(pool.submit(kube.create, obj) for obj in objs)

    try:
        started = time.monotonic()
        created = create_jobs(kube, manifests, args.concurrency, then=create_children)
        for future in list(futures):
            future.result()
        watch.wait([c for objs in children.values() for c in objs], started + args.timeout)
        return children_figures(started, created, {job: watch.ready_at(objs) for job, objs in children.items()})
    finally:
        pool.shutdown(cancel_futures=True)
        watch.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_operator(namespace: str, kubeconfig: str, metrics_port: int, log: Path) -> subprocess.Popen:
    command = Path(sys.executable).parent / "agents-operator"
    with log.open("w") as stderr:
        return subprocess.Popen(
            [
                str(command),
                "run",
                "--namespace",
                namespace,
                "--kubeconfig",
                kubeconfig,
                "--metrics-port",
                str(metrics_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


class OperatorGauge:
    """The operator's reconcile counters (its /metrics) and CPU time, counted from the moment it was made."""

    def __init__(self, pid: int, port: int):
        self.pid, self.port = pid, port
        self.base = self.samples()

    def samples(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            text = response.read().decode()
        samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}
        samples["cpu_s"] = cpu_seconds(self.pid)
        return samples

    def read(self) -> dict:
        now = self.samples()
        delta = {name: value - self.base.get(name, 0) for name, value in now.items()}
        count = delta.get("agents_operator_reconcile_seconds_count", 0)
        return {
            "reconciles": int(count),
            "reconcile_mean_s": round(delta.get("agents_operator_reconcile_seconds_sum", 0) / max(1, count), 3),
            "reconcile_errors": int(delta.get("agents_operator_reconcile_errors_total", 0)),
            "cpu_s": round(delta["cpu_s"], 1),
        }


def settle(gauge: OperatorGauge, deadline: float) -> float:
    """Until the operator's reconcile count stands still for a second (its backlog is done); when that began."""
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        count = gauge.read()["reconciles"]
        if count == last:
            return since
        last, since = count, time.monotonic()
        time.sleep(1.0)
    return since


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def play_kubelet(kube: Kube, namespace: str, pods: dict[str, list[str]], concurrency: int) -> dict[str, float]:
    """Every job's pods patched to Running, one after the other; when the last patch of each job was sent."""
    sent: dict[str, float] = {}

    def run(job: str) -> None:
        for pod in pods[job]:
            sent[job] = time.monotonic()
            body = {"status": {"phase": "Running"}}
            kube.request("PATCH", path("Pod", namespace, pod, "status"), body=body, content_type=MERGE_PATCH)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(run, pods))
    return sent


def status_figures(kube: Kube, namespace: str, children: dict[str, list[dict]], args: argparse.Namespace) -> dict:
    """Every job's pods set Running: how soon each job's status says so."""
    running = Watch(kube, naming.KIND, namespace, when=lambda job: (job.get("status") or {}).get("state") == "Running")
    try:
        pods = {job: [c["metadata"]["name"] for c in objs if c["kind"] == "Pod"] for job, objs in children.items()}
        started = time.monotonic()
        sent = play_kubelet(kube, namespace, pods, args.concurrency)
        running.wait(set(pods), time.monotonic() + args.timeout)
    finally:
        running.close()
    latencies = [running.seen[job] - sent[job] for job in sent if job in running.seen]
    return {
        "jobs_running": len(latencies),
        "status_running_p50_s": percentile(latencies, 0.5),
        "status_running_p99_s": percentile(latencies, 0.99),
        "all_running_s": round(max(running.seen[job] for job in pods) - started, 3) if latencies else None,
    }


def one_at_a_time(kube: Kube, namespace: str, watch: Children, args: argparse.Namespace) -> dict:
    """`--single` more jobs, each created once the previous one's children exist: latency without a burst."""
    latencies = []
    for i in range(args.single):
        manifest = job_manifest(f"single-{i:04d}", namespace, args.workers)
        objs = rendered_children(manifest)
        created = create_jobs(kube, [manifest], 1)
        watch.wait(objs, time.monotonic() + args.timeout)
        ready = watch.ready_at(objs)
        if ready is not None:
            latencies.append(ready - created[manifest["metadata"]["name"]])
    return {"single_jobs": len(latencies), "single_children_p50_s": percentile(latencies, 0.5)}


def warm_up(kube: Kube, namespace: str, watch: Children, operator: subprocess.Popen, args: argparse.Namespace) -> None:
    """One job first: its children show that the operator's watches are up (and its code paths are loaded)."""
    manifest = job_manifest(WARMUP, namespace, args.workers)
    create_jobs(kube, [manifest], 1)
    if not watch.wait(rendered_children(manifest), time.monotonic() + args.timeout) or operator.poll() is not None:
        raise RuntimeError(f"the operator did not create the warm-up job's children; its log: {args.operator_log}")


def operator_phase(kube: Kube, namespace: str, manifests: list[dict], args: argparse.Namespace) -> dict:
    """Phase 2: the jobs created with the operator running; their pods set Running; then jobs one at a time."""
    children = {m["metadata"]["name"]: rendered_children(m) for m in manifests}
    watch = Children(kube, namespace)
    port = free_port()
    operator = start_operator(namespace, args.kubeconfig, port, args.operator_log)
    try:
        warm_up(kube, namespace, watch, operator, args)
        settle(OperatorGauge(operator.pid, port), time.monotonic() + args.timeout)  # the warm-up's own echoes
        gauge = OperatorGauge(operator.pid, port)
        started = time.monotonic()
        created = create_jobs(kube, manifests, args.concurrency)
        watch.wait([c for objs in children.values() for c in objs], started + args.timeout)
        figures = children_figures(started, created, {job: watch.ready_at(objs) for job, objs in children.items()})
        figures["settled_s"] = round(settle(gauge, started + args.timeout) - started, 3)
        figures["after_burst"] = gauge.read()
        figures |= status_figures(kube, namespace, children, args)
        figures |= one_at_a_time(kube, namespace, watch, args)
        figures["peak_rss_mib"] = peak_rss_mib(operator.pid)
        figures["at_end"] = gauge.read()
        return figures
    finally:
        operator.send_signal(signal.SIGINT)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()
        watch.close()


def create_namespace(kube: Kube) -> str:
    name = f"agents-bench-{uuid.uuid4().hex[:6]}"
    kube.request(
        "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def delete_namespaces(kube: Kube, names: list[str], timeout: float = 300.0) -> None:
    """Delete them and wait until they are gone, so that the next run starts on a quiet server."""
    for name in names:
        kube.request("DELETE", f"/api/v1/namespaces/{name}")
    deadline = time.monotonic() + timeout
    for name in names:
        while time.monotonic() < deadline:
            try:
                kube.request("GET", f"/api/v1/namespaces/{name}")
            except ApiError as err:
                if err.status == 404:
                    break
                raise
            time.sleep(1.0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=100, help="jobs created at once (default 100)")
    parser.add_argument("--workers", type=int, default=4, help="workers per job, besides its one ps (default 4)")
    parser.add_argument("--concurrency", type=int, default=16, help="client threads creating the jobs (default 16)")
    parser.add_argument("--single", type=int, default=10, help="jobs created one at a time at the end (default 10)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds each wait may take (default 300)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config"))
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` unwinds: the operator is stopped
    args.operator_log = Path(tempfile.mkstemp(prefix="operator-", suffix=".log")[1])
    kube = Kube.connect(kubeconfig=args.kubeconfig)
    names = [f"load-{i:04d}" for i in range(args.jobs)]
    result: dict = {"jobs": args.jobs, "pods_per_job": args.workers + 1, "concurrency": args.concurrency}
    result["operator_threads"] = POOL_THREADS
    namespaces: list[str] = []
    try:
        for phase, run in (("bare_client", bare_client), ("operator", operator_phase)):
            namespaces.append(create_namespace(kube))
            result[phase] = run(
                kube, namespaces[-1], [job_manifest(n, namespaces[-1], args.workers) for n in names], args
            )
    finally:
        delete_namespaces(kube, namespaces)
        kube.close()
    bare, operator = result["bare_client"]["all_children_s"], result["operator"]["all_children_s"]
    result["ratio_all_children"] = round(operator / bare, 2) if bare and operator else None
    result["operator_log"] = str(args.operator_log)
    print(json.dumps(result))
    return 0 if result["ratio_all_children"] and result["operator"]["jobs_running"] == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
