"""Controller (controller.py) with a fake API: its memory of its own writes covers a watch that lags behind."""

from __future__ import annotations

import asyncio
import copy
import http.server
import logging
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta

import pytest

from agents_operator import chiefmetrics, jobstatus, metrics_reader, operator_main, podview, reconcile
from agents_operator import controller as ctl
from agents_operator.controller import Controller
from agents_operator.kube import ApiError, Executed, PlanInterrupted
from tests.world import NOW, World, make_job

KEY = ("ns", "pj")


class FakeKube:
    """Executes nothing; records plans. `fail_after` raises after that many actions (an API error mid-plan)."""

    def __init__(self) -> None:
        self.plans: list[reconcile.Plan] = []
        self.patches: list[dict] = []
        self.fail_after: int | None = None
        self.refuse: set[str] = set()
        """Names of children whose create the API server refuses."""
        self.events: dict[str, list[dict]] = {}
        """Events by pod name, as `pod_events` returns them."""
        self.event_reads: list[list[str]] = []

    def execute(self, job, plan, now=None) -> Executed:
        self.plans.append(plan)
        outcome = Executed()
        for i, action in enumerate(plan.actions):
            if self.fail_after is not None and i >= self.fail_after:
                raise PlanInterrupted(ApiError(500, "boom"), outcome)
            outcome.done.append(action)
            if isinstance(action, reconcile.WriteStatus):
                outcome.status_written = True
            if isinstance(action, reconcile.Create) and action.name in self.refuse:
                outcome.refused.append(reconcile.Refusal(action.kind, action.name, 403, "exceeded quota"))
        return outcome

    def get(self, *args):
        return None

    def pod_events(self, namespace, pods):
        self.event_reads.append(list(pods))
        return {name: self.events.get(name, []) for name in pods}

    def patch_status(self, namespace, name, patch):
        self.patches.append(patch)
        return patch


def running_world() -> World:
    world = World(make_job())
    world.started()
    return world


def controller_for(world: World, pods: list[dict] | None = None) -> tuple[Controller, FakeKube]:
    fake = FakeKube()
    controller = Controller(fake)  # type: ignore[arg-type]
    controller.now = lambda: NOW
    set_indexes(controller, world, pods)
    return controller, fake


def set_indexes(controller: Controller, world: World, pods: list[dict] | None = None) -> None:
    """What kopf's indexes would hold: possibly stale pods."""
    pods = list(world.pods.values()) if pods is None else pods
    controller.indexes = {
        "agents_jobs": {KEY: [copy.deepcopy(world.job)]},
        "agents_pods": {KEY: [podview.view_pod(p) for p in pods]},
        "agents_services": {KEY: [podview.view_child(s) for s in world.services.values()]},
        "agents_deployments": {},
    }


async def test_a_lagging_watch_does_not_count_a_failure_twice():
    world = running_world()
    world.set_phase("pj-worker-1", "Failed", exit_code=1)
    stale_pods = copy.deepcopy(list(world.pods.values()))
    controller, _ = controller_for(world)
    plan = await controller.reconcile(KEY)
    assert plan.of(reconcile.MarkCounted) == [reconcile.MarkCounted("pj-worker-1", 1)]
    world.apply(plan)
    # The job's watch has delivered the new status; the pod's watch has delivered nothing yet.
    set_indexes(controller, world, stale_pods)
    again = await controller.reconcile(KEY)
    assert again.of(reconcile.MarkCounted) == [] and again.of(reconcile.Delete) == []
    assert again.status["restarts"] == 1
    # Neither watch has delivered anything: the status the operator wrote is used, not the stale one.
    world_before = running_world()
    world_before.set_phase("pj-worker-1", "Failed", exit_code=1)
    set_indexes(controller, world_before, stale_pods)
    third = await controller.reconcile(KEY)
    assert third.of(reconcile.MarkCounted) == [] and third.status["restarts"] == 1


async def test_what_happened_before_an_api_error_is_remembered():
    world = running_world()
    world.set_phase("pj-worker-1", "Failed", exit_code=1)
    controller, fake = controller_for(world)
    fake.fail_after = 1  # the marker lands, the status write fails
    with pytest.raises(ApiError):
        await controller.reconcile(KEY)
    fake.fail_after = None
    plan = await controller.reconcile(KEY)  # the indexes have not seen the marker
    assert plan.of(reconcile.MarkCounted) == []
    assert plan.status["restarts"] == 1
    assert [a.name for a in plan.of(reconcile.Delete)] == ["pj-worker-1"]


async def test_a_pod_that_waits_with_nothing_said_is_explained_by_its_events():
    """A pod Pending with only ContainerCreating in its status: the kubelet's FailedMount Event is the reason,
    read once per EVENTS_TTL s and only for pods that wait past START_PATIENCE."""
    world = World(make_job())
    world.settle()
    young = jobstatus.timestamp(NOW - timedelta(seconds=podview.START_PATIENCE - 1))
    for pod in world.pods.values():
        pod["metadata"]["creationTimestamp"] = young
    old = world.pods["pj-worker-1"]["metadata"]
    old["creationTimestamp"] = jobstatus.timestamp(NOW - timedelta(seconds=30))
    missing = 'MountVolume.SetUp failed for volume "config" : configmap "settings" not found'
    controller, fake = controller_for(world)
    fake.events["pj-worker-1"] = [
        {
            "involvedObject": {"kind": "Pod", "name": "pj-worker-1"},
            "type": "Warning",
            "reason": "FailedMount",
            "message": missing,
            "lastTimestamp": jobstatus.timestamp(NOW - timedelta(seconds=5)),
        }
    ]
    plan = await controller.reconcile(KEY)
    failure = next(c for c in plan.status["conditions"] if c["type"] == "ReplicaFailure")
    assert (failure["status"], failure["reason"]) == ("True", "FailedMount")
    assert failure["message"] == f"pod pj-worker-1 cannot start: {missing}"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "FailedMount")]
    assert fake.event_reads == [["pj-worker-1"]]  # the young pods may just be starting
    await controller.reconcile(KEY)
    assert fake.event_reads == [["pj-worker-1"]]  # read again only after EVENTS_TTL
    world.set_phase("pj-worker-1", "Running")
    set_indexes(controller, world)
    await controller.reconcile(KEY)
    assert controller.jobs[KEY].memory.pod_events == {}  # nothing kept of pods that no longer wait


async def test_kicks_are_coalesced_and_errors_retried():
    world = running_world()
    del world.pods["pj-ps-0"]  # something to do
    controller, fake = controller_for(world)
    fake.fail_after = 0
    for _ in range(5):
        controller.kick(KEY)
    await controller.task(KEY)
    assert len(fake.plans) <= 2  # five kicks, at most one run plus one rerun
    assert controller.jobs[KEY].memory.failures == 1 and controller.jobs[KEY].wakeup is not None  # retried later
    await controller.shutdown()


async def test_children_of_a_job_that_is_gone_are_deleted():
    world = running_world()
    controller, _ = controller_for(world)
    controller.indexes["agents_jobs"] = {}
    deleted = []
    controller.kube.delete = lambda kind, ns, name, grace=None: deleted.append((kind, name))  # type: ignore[attr-defined]
    await controller.reconcile(KEY)
    assert sorted(deleted) == sorted([("Pod", n) for n in world.pods] + [("Service", n) for n in world.services])
    assert KEY not in controller.jobs  # nothing is kept of a job that is gone, its lock included


async def test_a_job_deleted_while_it_is_reconciled_is_forgotten_once_the_reconcile_ends():
    world = running_world()
    controller, _ = controller_for(world)
    await controller.reconcile(KEY)
    record = controller.jobs[KEY]
    async with controller.locked(KEY):
        controller.forget(KEY)  # the job's DELETED event, while a reconcile holds its lock
        assert controller.jobs[KEY] is record and record.memory.written_status is None
    assert KEY not in controller.jobs
    controller.indexes["agents_jobs"] = {}
    controller.indexes["agents_pods"] = {}
    controller.indexes["agents_services"] = {}
    controller.kick(KEY)  # the orphans' check after the DELETED event
    await controller.task(KEY)
    assert KEY not in controller.jobs


async def test_refused_children_are_reported_at_once_and_retried_with_backoff():
    world = World(make_job())
    controller, fake = controller_for(world)
    fake.refuse = {"pj-ps-0", "pj-worker-0", "pj-worker-1"}
    for failures in (1, 2, 3):
        wakeup = controller.record(KEY).wakeup
        if wakeup is not None:
            wakeup.cancel()
        controller._wake(KEY)  # the wake-up the last failure scheduled (not waited for)
        await controller.task(KEY)
        report = fake.plans[-1]  # the reconcile's second plan: the refusals, in the same reconcile
        assert report.status["state"] == "ReplicaFailure"
        assert [e.reason for e in report.events] == (
            ["FailedCreate"] * 6 if failures == 1 else []
        )  # 3 Services, 3 Pods
        assert controller.jobs[KEY].memory.failures == failures
        assert controller.jobs[KEY].wakeup.when() - asyncio.get_running_loop().time() > 0.5 * 2**failures - 0.1
    fake.refuse = set()
    await controller.reconcile(KEY)
    assert controller.jobs[KEY].memory.failures == 0
    await controller.shutdown()


# --- the chief's /metrics ----------------------------------------------------------------------------------

SAMPLE = b"agents_trainer_global_step 42\n"


class MetricsServer(http.server.ThreadingHTTPServer):
    """A chief's /metrics in a thread of its own: `size` bytes of samples (None: endless), with a
    Content-Length when `declare`; `sent` counts what got out before the reader hung up."""

    def __init__(self, size: int | None, declare: bool = False):
        super().__init__(("127.0.0.1", 0), _MetricsHandler)
        self.size, self.declare, self.sent = size, declare, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/metrics"


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        size = self.server.size
        self.send_response(200)
        if self.server.declare and size is not None:
            self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk = SAMPLE * (metrics_reader.METRICS_CHUNK // len(SAMPLE))
        try:
            while size is None or self.server.sent < size:
                part = chunk if size is None else chunk[: size - self.server.sent]
                self.wfile.write(part)
                self.server.sent += len(part)
        except OSError:
            pass  # the reader hung up

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def serve_metrics() -> Iterator:
    servers: list[MetricsServer] = []

    def start(size: int | None, declare: bool = False) -> MetricsServer:
        server = MetricsServer(size, declare)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


async def read_progress_watching_the_loop(controller: Controller) -> tuple[dict | None, float]:
    """read_progress, and the longest the event loop was held up meanwhile."""
    lags: list[float] = []
    monitor = asyncio.create_task(operator_main.monitor_loop_lag(lags.append, interval=0.01))
    await asyncio.sleep(0)  # the monitor is asleep before the read begins
    progress = await controller.read_progress(KEY)
    await asyncio.sleep(0.05)  # a hold-up at the very end shows at the monitor's next wake-up
    monitor.cancel()
    assert lags
    return progress, max(lags)


@pytest.mark.parametrize(("size", "declare"), [(200 << 20, True), (None, False)], ids=["200MB", "endless"])
async def test_a_hostile_metrics_body_is_refused_after_the_cap(serve_metrics, caplog, size, declare):
    server = serve_metrics(size, declare)
    controller, fake = controller_for(running_world())
    controller.metrics_url = lambda job, ns, port: server.url
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger=ctl.__name__):
            progress, lag = await read_progress_watching_the_loop(controller)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert progress is None and fake.patches == []
    assert "refused: larger than" in caplog.text
    # Sent, not read: what the kernel buffers on both ends of the loopback connection comes on top of the cap.
    assert server.sent < metrics_reader.METRICS_LIMIT + (16 << 20)
    assert peak < 4 * metrics_reader.METRICS_LIMIT
    assert lag < 0.5  # reading and parsing the whole of a 200 MB body held the loop up for 24 s


async def test_metrics_under_the_cap_are_parsed_off_the_event_loop(serve_metrics, monkeypatch):
    server = serve_metrics(metrics_reader.METRICS_LIMIT)
    controller, fake = controller_for(running_world())
    controller.metrics_url = lambda job, ns, port: server.url
    on_loop = []
    parse = chiefmetrics.progress_from_metrics

    def recording(text, now):
        on_loop.append(asyncio._get_running_loop() is not None)
        return parse(text, now)

    monkeypatch.setattr(chiefmetrics, "progress_from_metrics", recording)
    progress, _ = await read_progress_watching_the_loop(controller)
    assert progress["globalStep"] == 42 and fake.patches == [{"progress": progress}]
    assert on_loop == [False]


async def test_progress_is_read_on_its_own_interval_apart_from_resyncs(monkeypatch):
    """On the real node the pendulum example trained in under 30 s, the old shared interval: `kubectl get aj`
    never showed a Step. Progress now has its own loop, and its default is short enough for such a job."""
    controller, _ = controller_for(running_world())
    controller.options = ctl.ControllerOptions(progress_interval=0.01, resync_interval=3600)
    read: list = []

    async def fake_read(key):
        read.append(key)

    monkeypatch.setattr(controller, "read_progress", fake_read)
    monkeypatch.setattr(controller, "kick", lambda key, **_: pytest.fail("resynced on the progress interval"))
    loops = [asyncio.create_task(controller.progress_loop()), asyncio.create_task(controller.resync_loop())]
    await asyncio.sleep(0.2)
    for loop in loops:
        loop.cancel()
    assert read.count(KEY) >= 3
    assert ctl.ControllerOptions().progress_interval <= 10 < ctl.ControllerOptions().resync_interval
