"""Faults a real API server cannot be made to produce on demand, injected with an emulated one (kmock).

Everything the API server decides is tested on a real one (tests/e2e); what kmock adds is failure on demand:
server errors on chosen requests, to show that the operator retries them and that what it did before an error
is never done twice. kmock has no uid, resourceVersion or garbage collection; the tests fill in what a real
server always gives (a uid on every new object, a constant resourceVersion on jobs).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable

import attrs
import kmock
import pytest
import pytest_asyncio

from agents_operator import kube, naming, operator_main
from agents_operator.controller import Controller
from tests.world import make_job

pytestmark = pytest.mark.timeout(60)

JOBS = "agents.dev/v1alpha1/agentsjobs"


class UidKube(kube.Kube):
    """Fills in the uid a real API server gives every new object, which kmock does not.

    Without uids, kopf's indexes key objects by (namespace, name, None), so the pod and the Service of one
    replica (same name) would overwrite each other's index entries: a kmock artefact, not a cluster's.
    """

    def create(self, obj: dict) -> bool:
        obj = {**obj, "metadata": {**obj["metadata"], "uid": str(uuid.uuid4())}}
        return super().create(obj)


class Cluster:
    """The test's side of the emulated API: writes through HTTP, so that watchers see them."""

    def __init__(self, server: FaultyEmulator, controller: Controller, namespace: str):
        self.server = server
        self.controller = controller
        self.ns = namespace

    async def create_job(self, job: dict) -> None:
        job["metadata"]["uid"] = str(uuid.uuid4())  # what a real API server would give
        job["metadata"]["namespace"] = self.ns
        # kopf patches its own annotations with a JSON-patch test of resourceVersion, which kmock never sets
        # nor bumps: a constant one satisfies the test.
        job["metadata"]["resourceVersion"] = "1"
        async with self.server.post(f"/apis/{JOBS.rsplit('/', 1)[0]}/namespaces/{self.ns}/agentsjobs", json=job) as r:
            assert r.status < 300, await r.text()

    async def patch(self, path: str, body: dict) -> None:
        async with self.server.patch(path, json=body) as r:
            assert r.status < 300, await r.text()

    async def patch_job(self, name: str, body: dict) -> None:
        await self.patch(f"/apis/agents.dev/v1alpha1/namespaces/{self.ns}/agentsjobs/{name}", body)

    async def set_phase(self, pod: str, phase: str, exit_code: int | None = None) -> None:
        pod_status: dict = {"phase": phase}
        if exit_code is not None:
            pod_status["containerStatuses"] = [
                {"name": "agents", "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}
            ]
        await self.patch(f"/api/v1/namespaces/{self.ns}/pods/{pod}", {"status": pod_status})

    async def delete(self, path: str) -> None:
        async with self.server.delete(path) as r:
            assert r.status < 300, await r.text()

    def objects(self, resource: str) -> dict[str, dict]:
        out = {}
        for (res, ns, name), obj in list(self.server.objects.items()):
            if ns == self.ns and str(res.plural) == resource and not obj.deleted:
                out[name] = obj.raw
        return out

    def replaced(self, pod: str) -> bool:
        """The pod exists and has not run yet (kmock sets no phase on a new pod)."""
        return pod in self.pods() and (self.pods()[pod].get("status") or {}).get("phase") in (None, "Pending")

    def pods(self) -> dict[str, dict]:
        return self.objects("pods")

    def job(self, name: str = "pj") -> dict | None:
        return self.objects("agentsjobs").get(name)

    def job_status(self, name: str = "pj") -> dict:
        return (self.job(name) or {}).get("status") or {}

    def events(self) -> list[tuple[str, str]]:
        return [(e["reason"], e["message"]) for e in self.objects("events").values()]

    async def until(self, check: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {what or check}: status={self.job_status()}")
            await asyncio.sleep(0.05)


def declare_resources(server: FaultyEmulator) -> None:
    for resource, kind in (
        (JOBS, naming.KIND),
        ("v1/pods", "Pod"),
        ("v1/services", "Service"),
        ("apps/v1/deployments", "Deployment"),
        ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
        ("v1/events", "Event"),
    ):
        server.resources[resource] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            verbs={"list", "watch", "get", "create", "patch", "delete"},
            subresources={"status"} if kind in (naming.KIND, "Pod") else set(),
        )
    # kopf waits for these two in discovery; cluster-wide, it lists CRDs but not namespaces (kmock cannot
    # serve /api/v1/namespaces, which kopf reads to follow namespace patterns).
    server.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs={"list"})
    server.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch"}
    )


class OperatorThread:
    """`operator_main.serve` in its own thread and loop, as in production: kopf waits for every task of its
    loop when it stops, and would otherwise wait for the test's own."""

    def __init__(self, server: FaultyEmulator, **overrides):
        self.server = server
        self.options = operator_main.OperatorOptions(
            all_namespaces=True,
            host=str(server.url),
            post_kopf_events=False,
            progress_interval=1.0,
            resync_interval=1.0,
            liveness=f"http://127.0.0.1:{_free_port()}/healthz",
            metrics_port=_free_port(),
            **overrides,
        )
        self.stop_flag = threading.Event()
        self.controllers: list[Controller] = []
        self.thread: threading.Thread | None = None

    async def start(self) -> Controller:
        ready = threading.Event()

        def run() -> None:
            asyncio.run(
                operator_main.serve(
                    self.options,
                    kube=UidKube.connect(host=str(self.server.url)),
                    stop_flag=self.stop_flag,
                    ready_flag=ready,
                    controller_hook=self.controllers.append,
                )
            )

        self.thread = threading.Thread(target=run, name="operator", daemon=True)
        self.thread.start()
        assert await asyncio.to_thread(ready.wait, 15), "the operator did not start"
        controller = self.controllers[0]
        controller.options_for_tests = self.options  # type: ignore[attr-defined]
        controller.metrics_url = lambda job, ns, port: f"{self.server.url}/metrics/{ns}/{job}"
        return controller

    async def stop(self) -> None:
        self.stop_flag.set()
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join, 15)
            assert not self.thread.is_alive(), "the operator did not stop"


@pytest_asyncio.fixture
async def operator() -> AsyncIterator[tuple[FaultyEmulator, Controller]]:
    """A fresh emulated API server and operator per test (kmock's cost per request grows with every request
    it has served, so a shared one slows down test after test)."""
    async with FaultyEmulator() as server, kmock.Server(server):
        declare_resources(server)
        op = OperatorThread(server)
        controller = await op.start()
        try:
            yield server, controller
        finally:
            await op.stop()


@pytest_asyncio.fixture
async def cluster(operator, request) -> AsyncIterator[Cluster]:
    server, controller = operator
    cluster = Cluster(server, controller, namespace=f"t{abs(hash(request.node.name)) % 10**8}")
    yield cluster
    for name in cluster.objects("agentsjobs"):  # finished with: the operator stops serving them
        await cluster.delete(f"/apis/agents.dev/v1alpha1/namespaces/{cluster.ns}/agentsjobs/{name}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def started(cluster: Cluster, **job_kwargs) -> None:
    """Creates a job and drives its 3 pods to Running (only its own: another job's may still be going)."""
    job = make_job(**job_kwargs)
    name = job["metadata"]["name"]
    await cluster.create_job(job)

    def own_pods() -> list[str]:
        return [pod for pod, body in cluster.pods().items() if body["metadata"]["labels"][naming.LABEL_JOB] == name]

    await cluster.until(lambda: len(own_pods()) == 3, what="3 pods")
    for pod in own_pods():
        await cluster.set_phase(pod, "Running")
    await cluster.until(lambda: cluster.job_status(name).get("state") == "Running", what="Running")


@attrs.frozen
class InternalError(kmock.KubernetesError):
    status: int = 500
    reason: str = "InternalError"
    message: str = "etcdserver: request timed out"


class Failing:
    """A kmock filter that matches `times` requests of a method and path suffix. kmock may ask a filter about
    one request more than once: the requests it matched are remembered by id."""

    def __init__(self, method: str, suffix: str, times: int = 1):
        self.method, self.suffix, self.left = method, suffix, times
        self.matched: set[int] = set()

    def __call__(self, request) -> bool:
        if request.id in self.matched:
            return True
        if self.left <= 0 or request.method != self.method:
            return False
        if not str(request.url).split("?")[0].endswith(self.suffix):
            return False
        self.left -= 1
        self.matched.add(request.id)
        return True


class FaultyEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, where a request that an injected fault answers changes nothing.

    kmock's own emulator stores every create, patch and delete before it looks for a reaction, so a request
    answered with a server error had taken effect all the same: the pods of failed creates appeared at once,
    and a test waiting for them could go on before the operator had even seen the error. Here the fault
    answers first, as an API server does that failed to write.
    """

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Failing] = []

    def fail(self, fault: Failing, error: type[kmock.KubernetesError] = InternalError) -> None:
        self.faults.append(fault)
        self[fault] << error

    async def _handle(self, request):
        if any(fault(request) for fault in self.faults):
            return await kmock.KubernetesScaffold._handle(self, request)  # the reactions only: the fault answers
        return await super()._handle(request)


async def test_server_errors_on_creates_are_retried_until_they_pass(cluster):
    failing = Failing("POST", f"/namespaces/{cluster.ns}/pods", times=4)
    cluster.server.fail(failing)
    await cluster.create_job(make_job())
    await cluster.until(lambda: len(cluster.pods()) == 3, timeout=30, what="pods, after the errors")
    assert failing.left == 0
    assert cluster.controller.metrics.errors._value.get() >= 1  # each failure retried after a backoff
    assert cluster.job_status()["state"] == "Created"  # a server error is no refusal: no ReplicaFailure
    assert not any(c["type"] == "ReplicaFailure" for c in cluster.job_status()["conditions"])


async def test_a_status_write_that_fails_after_the_marker_counts_the_failure_once(cluster):
    await started(cluster)
    failing = Failing("PATCH", "/agentsjobs/pj/status")
    cluster.server.fail(failing)
    await cluster.set_phase("pj-worker-1", "Failed", exit_code=137)
    await cluster.until(lambda: cluster.replaced("pj-worker-1"), timeout=30, what="replaced after the error")
    assert failing.left == 0  # the marker went on the pod, then the status write failed once
    await cluster.until(lambda: cluster.job_status().get("restarts") == 1, what="restart counted")
    await asyncio.sleep(1.0)  # resyncs and late watch events must not count it again
    assert cluster.job_status()["restarts"] == 1
