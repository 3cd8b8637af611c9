"""Running the operator: settings, login, Prometheus metrics, peering, probes, logging. `agents-operator run`.

Everything here is process plumbing around `handlers.register`; `serve` is also what the kmock wiring tests
and the e2e suite start (in-process), so they run the same code as `agents-operator run`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import math
import os
import socket
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import kopf
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agents_operator import jobstatus, reconcile, render
from agents_operator.controller import PROGRESS_INTERVAL, RESYNC_INTERVAL, Controller, ControllerOptions
from agents_operator.handlers import register
from agents_operator.kube import CALLER_THREADS, Executed, Kube
from agents_operator.metrics_server import MetricsServer
from agents_operator.peering import PeeringGate, own_identity

log = logging.getLogger(__name__)

GLOB_CHARACTERS = set("*?[]!")
"""What makes a --namespace a pattern (kopf then follows the namespaces that appear and match it)."""
LOOP_LAG_INTERVAL = 0.1
"""Seconds between the loop-lag monitor's wake-ups. A stall reads as up to this much shorter than it was,
depending on where in the monitor's sleep it began."""


@dataclass
class OperatorOptions:
    """`agents-operator run`'s options."""

    namespaces: list[str] = field(default_factory=list)
    """Namespaces to serve (globs allowed); empty with all_namespaces=False means 'default'."""
    all_namespaces: bool = False
    default_image: str = render.DEFAULT_IMAGE
    allow_privileged: bool = False
    """Run AgentsJobs with spec.podSecurity Privileged; off, they fail with PrivilegedNotAllowed."""
    operator_namespace: str | None = None
    """The operator's own namespace (the chart sets POD_NAMESPACE from the downward API): job pods open their
    metrics port to the operator's pods there only. None: to nobody."""
    operator_pod_labels: dict[str, str] = field(default_factory=dict)
    """Labels that select the operator's pods (the chart passes its selector labels)."""
    log_format: str = "plain"
    """plain or json."""
    verbose: bool = False
    peering: str | None = None
    """KopfPeering name for HA (replicas with the same name elect one active); None: standalone."""
    priority: int = 0
    """Peering priority; 0 with peering: derived from the pod's name, so that replicas never tie (kopf pauses
    every operator when two live peers have the same priority)."""
    liveness: str | None = None
    """e.g. http://0.0.0.0:8080/healthz: kopf serves liveness there, with the probes' results."""
    metrics_port: int = 0
    """Prometheus /metrics port of the operator; 0 disables it."""
    kubeconfig: str | None = None
    context: str | None = None
    host: str | None = None
    """API server URL without credentials (tests)."""
    progress_interval: float = PROGRESS_INTERVAL
    resync_interval: float = RESYNC_INTERVAL
    watch_timeout: int = 300
    """Server-side timeout of every watch request, whole seconds; the watch is re-established after it."""
    request_timeout: float = 60.0
    """Timeout of every other API request."""
    post_kopf_events: bool = True
    """Let kopf post its own Events about handler failures (warnings and errors only)."""


class OperatorMetrics:
    """The operator's Prometheus metrics, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.jobs = Gauge("agents_operator_jobs", "AgentsJobs by state.", ["state"], registry=self.registry)
        self.reconcile_seconds = Histogram(
            "agents_operator_reconcile_seconds",
            "Time to plan and execute one reconcile of a job.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.created = Counter(
            "agents_operator_children_created", "Children created.", ["kind"], registry=self.registry
        )
        self.deleted = Counter(
            "agents_operator_children_deleted", "Children deleted.", ["kind"], registry=self.registry
        )
        self.restarts = Counter("agents_operator_restarts", "Failed pods replaced.", registry=self.registry)
        self.errors = Counter("agents_operator_reconcile_errors", "Reconciles that failed.", registry=self.registry)
        self.loop_lag = Histogram(
            "agents_operator_event_loop_lag_seconds",
            "How late the event loop ran a timer: the time it was kept from serving watches, probes and jobs.",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        for state in jobstatus.ORDER:
            self.jobs.labels(state).set(0)

    def observe(self, plan: reconcile.Plan, outcome: Executed, seconds: float) -> None:
        self.reconcile_seconds.observe(seconds)
        for kind, n in outcome.created.items():
            self.created.labels(kind).inc(n)
        for kind, n in outcome.deleted.items():
            self.deleted.labels(kind).inc(n)
        if not outcome.job_gone:
            self.restarts.inc(len(plan.of(reconcile.MarkCounted)))

    def set_states(self, states: Iterable[str | None]) -> None:
        counts = dict.fromkeys(jobstatus.ORDER, 0)
        for state in states:
            if state in counts:
                counts[state] += 1
        for state, n in counts.items():
            self.jobs.labels(state).set(n)


async def monitor_loop_lag(observe: Callable[[float], None], interval: float = LOOP_LAG_INTERVAL) -> None:
    """Sleep `interval` again and again and `observe` how late each wake-up came.

    The operator is one event loop: anything that runs on it without awaiting (a parse, a render, a blocking
    call) holds up every watch, probe and job. The lateness of a timer is that hold-up, as the loop lives it.
    """
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - start - interval))


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf copies every watched object into a "diff base" on every watch event, for handlers that react to
    changes (create, update). The operator has none (it reconciles from events and generations), so nothing
    is built or stored: the copies were a tenth of its CPU under load."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> None:  # type: ignore[override]
        return None

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


def configure_settings(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
    """kopf settings: timeouts, where kopf keeps its own bookkeeping, peering, Events."""
    # kopf sends `timeoutSeconds=str(server_timeout)`, and the API server refuses "300.0" (400: it parses an
    # integer), so every watch would fail: whole seconds only.
    settings.watching.server_timeout = math.ceil(options.watch_timeout)
    settings.watching.client_timeout = settings.watching.server_timeout + 30
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = options.request_timeout
    settings.networking.connect_timeout = 30
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.enabled = options.post_kopf_events
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 32
    # Serving exact namespaces needs no scanning of the cluster's namespaces and CRDs, which a namespaced
    # install is not granted: kopf would retry those 403s for about a minute before serving anything.
    settings.scanning.disabled = not options.all_namespaces and not any(
        set(namespace) & GLOB_CHARACTERS for namespace in options.namespaces
    )
    if options.peering:
        settings.peering.name = options.peering
        settings.peering.priority = peering_priority(options)
        settings.peering.standalone = False
    else:
        settings.peering.standalone = True


def peering_priority(options: OperatorOptions) -> int:
    if options.priority:
        return options.priority
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    return 1 + zlib.crc32(instance.encode()) % 1_000_000


def peering_gate(options: OperatorOptions, kube: Kube) -> PeeringGate | None:
    """What the controller's own loops ask before acting (see `peering`); kopf is given the same identity."""
    if not options.peering:
        return None
    return PeeringGate(kube, options.peering, own_identity(), peering_priority(options), options.all_namespaces)


def build(options: OperatorOptions, kube: Kube | None = None) -> tuple[kopf.OperatorRegistry, Controller]:
    """A registry with every handler, and the controller behind them."""
    kube = kube or Kube.connect(options.kubeconfig, options.context, options.host, timeout=options.request_timeout)
    controller = Controller(
        kube,
        ControllerOptions(
            render=render.RenderOptions(
                default_image=options.default_image,
                operator_namespace=options.operator_namespace,
                operator_pod_labels=tuple(sorted(options.operator_pod_labels.items())),
            ),
            allow_privileged=options.allow_privileged,
            progress_interval=options.progress_interval,
            resync_interval=options.resync_interval,
        ),
        metrics=OperatorMetrics(),
        peers=peering_gate(options, kube),
    )
    registry = kopf.OperatorRegistry()
    register(registry, controller)

    @kopf.on.startup(id="settings", registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_settings(settings, options)

    @kopf.on.login(id="login", registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(**controller.kube.connection_info())

    return registry, controller


async def serve(
    options: OperatorOptions,
    kube: Kube | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    controller_hook: Any = None,
) -> None:
    """Run the operator until `stop_flag` (or a signal)."""
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(CALLER_THREADS, "agents-kube")
    )
    registry, controller = build(options, kube)
    if controller_hook:
        controller_hook(controller)
    server = None
    if options.metrics_port:
        server = MetricsServer(controller.metrics.registry, "", options.metrics_port)
        log.info("metrics on :%d/metrics", options.metrics_port)
    background = [
        asyncio.create_task(controller.resync_loop(), name="agents resync"),
        asyncio.create_task(controller.progress_loop(), name="agents progress"),
        asyncio.create_task(monitor_loop_lag(controller.metrics.loop_lag.observe), name="agents loop lag"),
    ]
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=options.all_namespaces,
            namespaces=[] if options.all_namespaces else (options.namespaces or ["default"]),
            standalone=not options.peering,
            peering_name=options.peering,
            priority=peering_priority(options) if options.peering else 0,
            identity=controller.peers.identity if controller.peers else None,
            liveness_endpoint=options.liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await controller.shutdown()
        if server is not None:
            server.close()
        controller.kube.close()


def settle_heap() -> None:
    """Collect once, then freeze what is alive (the imported modules): no full collection walks it again.

    A full garbage collection holds the GIL while it walks every tracked object, so it stalls the event loop
    whichever thread starts it. Of the collections a large job's reconciles set off, the modules (some 70k
    objects) made most of the cost: 50-175 ms each, the largest event-loop lags left once planning ran on a
    worker thread (benchmarks/bench_operator_loop_lag.py).
    """
    gc.collect()
    gc.freeze()


def run(options: OperatorOptions) -> int:
    """`agents-operator run`: blocks until SIGINT/SIGTERM; kube.NoCluster, before anything is set up (logging
    included), when there is no cluster to talk to."""
    kube = Kube.connect(options.kubeconfig, options.context, options.host, timeout=options.request_timeout)
    kopf.configure(
        verbose=options.verbose,
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    if not options.verbose:  # kopf says "Handler 'pod-event' succeeded." for every watch event
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settle_heap()
    asyncio.run(serve(options, kube))
    return 0
