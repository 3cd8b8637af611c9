"""kopf glue: indexes of what exists, triggers, and one `Controller.reconcile` that plans and executes.

Nothing here decides anything: `reconcile.plan` does, from the indexes (kopf keeps them current from its
watches; no listing inside handlers). What this module adds is what a pure function cannot know:

- triggers: a job listed, added, deleted or with an unobserved spec generation, any event of a job's pod,
  Service, Deployment or NetworkPolicy, a periodic resync (which also reads progress), and the wake-up a
  plan asks for (deadline, TTL);
- one reconcile at a time per job (an asyncio lock), with bursts of pod events coalesced into one rerun;
- the operator's own recent writes, remembered until the watch delivers them (`JobMemory`), so that a stale
  cache neither counts a failure twice nor rewinds the status;
- errors: a job whose reconcile fails (children refused included: reported first) is retried with backoff;
  it never stops the others;
- planning on a worker thread, with what the job's spec renders to kept per job (`JobMemory.desired`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import aiohttp
import kopf

from agents_operator import api, naming, reconcile, render, status
from agents_operator.kube import ApiError, Kube

log = logging.getLogger(__name__)

JOBS = (naming.GROUP, naming.VERSION, naming.PLURAL)
OURS = {naming.LABEL_JOB: kopf.PRESENT}
Key = tuple[str, str]
"""(namespace, job name)"""

MEMORY_SECONDS = 60.0
"""How long our own writes may stay unconfirmed by the watch before the cache is believed again."""
METRICS_LIMIT = 1 << 20
"""Most bytes of the chief's /metrics the operator reads (the trainer's are a few KiB). The endpoint is the
job's own code, reachable by anyone the NetworkPolicy lets in: a bigger body is refused, not read."""
METRICS_CHUNK = 64 << 10


@dataclass
class JobMemory:
    """What the operator keeps about one job between reconciles: writes it made that the watch may not have
    delivered yet, and what the job's spec renders to."""

    written_status: dict | None = None
    written_at: float = 0.0
    deleting: set[str] = field(default_factory=set)
    counted: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    desired: reconcile.DesiredCache = field(default_factory=reconcile.DesiredCache)


@dataclass
class ControllerOptions:
    render: render.RenderOptions = field(default_factory=render.RenderOptions)
    allow_privileged: bool = False
    """Run jobs with spec.podSecurity Privileged (--allow-privileged-jobs); else they fail unrendered."""
    progress_interval: float = 30.0
    """Seconds between reads of the chief's /metrics (and resyncs of every job)."""
    metrics_timeout: float = 5.0
    max_backoff: float = 60.0


def _now() -> datetime:
    return datetime.now(UTC)


def _first(index: kopf.Index | None, key: Key) -> Any:
    if index is None:
        return None
    try:
        store = index[key]
    except KeyError:
        return None
    for value in store:
        return value
    return None


def _all(index: kopf.Index | None, key: Key) -> list:
    if index is None:
        return []
    try:
        return list(index[key])
    except KeyError:
        return []


class Controller:
    """Reconciles jobs: serialised per job, coalesced, retried, with metrics."""

    def __init__(self, kube: Kube, options: ControllerOptions | None = None, metrics: Any = None):
        self.kube = kube
        self.options = options or ControllerOptions()
        self.metrics = metrics
        self.indexes: dict[str, kopf.Index] = {}
        self.locks: dict[Key, asyncio.Lock] = {}
        self.memory: dict[Key, JobMemory] = {}
        self.dirty: set[Key] = set()
        self.tasks: dict[Key, asyncio.Task] = {}
        self.wakeups: dict[Key, asyncio.TimerHandle] = {}
        self.states: dict[Key, str | None] = {}
        self.metrics_url: Callable[[str, str, int], str] = status.metrics_url
        self.now: Callable[[], datetime] = _now

    # --- indexes -------------------------------------------------------------------------------------------

    def remember_indexes(self, kwargs: dict[str, Any]) -> None:
        for name in ("agents_jobs", "agents_pods", "agents_services", "agents_deployments", "agents_networkpolicies"):
            if name in kwargs:
                self.indexes[name] = kwargs[name]

    def observed(self, key: Key) -> tuple[dict | None, list, list, list]:
        job = _first(self.indexes.get("agents_jobs"), key)
        return (
            copy.deepcopy(job) if job else None,
            _all(self.indexes.get("agents_pods"), key),
            _all(self.indexes.get("agents_services"), key),
            # Deployments and NetworkPolicies: the plan only needs their kind and name.
            _all(self.indexes.get("agents_deployments"), key) + _all(self.indexes.get("agents_networkpolicies"), key),
        )

    # --- reconcile ---------------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> reconcile.Plan | None:
        """Plan and execute for one job; raises on API errors (the caller retries)."""
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            self.dirty.discard(key)
            job, pods, services, deployments = self.observed(key)
            if job is None:
                await self._orphans(key)
                return None
            memory = self.memory.setdefault(key, JobMemory())
            job, pods = self._overlay(job, pods, memory)
            started = time.perf_counter()
            plan = await self.plan(job, pods, services, deployments, memory.desired)
            if plan.actions and log.isEnabledFor(logging.DEBUG):  # a large job's plan is thousands of actions
                log.debug("%s/%s: %s", *key, ", ".join(_describe_action(a) for a in plan.actions))
            try:
                outcome = await asyncio.to_thread(self.kube.execute, job, plan, self.now())
            except Exception as err:
                partial = getattr(err, "outcome", None)
                if partial is not None:
                    self._learn(key, memory, plan, partial)  # what did happen must not happen twice
                raise
            self._learn(key, memory, plan, outcome)
            if self.metrics:
                self.metrics.observe(plan, outcome, time.perf_counter() - started)
            gone = outcome.job_gone or outcome.job_deleted
            if outcome.refused and not gone:
                plan = await self._report_refusals(key, job, plan, outcome.refused, memory)
            self.set_state(key, None if gone else plan.status.get("state"))
            if plan.requeue_after is not None and not gone:
                self.wake_later(key, plan.requeue_after)
            if outcome.refused and not gone:
                raise Refused(outcome.refused)
            memory.failures = 0
            return plan

    async def _report_refusals(
        self, key: Key, job: dict, plan: reconcile.Plan, refusals: list[reconcile.Refusal], memory: JobMemory
    ) -> reconcile.Plan:
        """Write the refusals into the job's status and Events at once (the retry comes later, backed off)."""
        report = reconcile.refused(plan.status, refusals, self.now())
        outcome = await asyncio.to_thread(self.kube.execute, job, report, self.now())
        self._learn(key, memory, report, outcome)
        return replace(report, requeue_after=plan.requeue_after)

    async def plan(
        self, job: dict, pods: list, services: list, deployments: list, cache: reconcile.DesiredCache
    ) -> reconcile.Plan:
        """`reconcile.plan` on a worker thread: for a large job it takes longer than the event loop may stall,
        and every watch, probe and other job waits on the loop. The loop only waits for the result."""
        return await asyncio.to_thread(
            reconcile.plan,
            job,
            pods,
            services,
            deployments,
            now=self.now(),
            options=self.options.render,
            cache=cache,
            allow_privileged=self.options.allow_privileged,
        )

    def _overlay(self, job: dict, pods: list, memory: JobMemory) -> tuple[dict, list]:
        indexed_status = job.get("status") or {}
        if memory.written_status is not None:
            stale = time.monotonic() - memory.written_at > MEMORY_SECONDS
            if stale or _same_status(indexed_status, memory.written_status):
                memory.written_status = None
            else:
                job["status"] = copy.deepcopy(memory.written_status)
        names = {p.name for p in pods}
        memory.deleting &= names
        memory.counted = {
            n: v for n, v in memory.counted.items() if n in names and not any(p.name == n and p.counted for p in pods)
        }
        return job, status.overlay(pods, memory.deleting, memory.counted)

    def _learn(self, key: Key, memory: JobMemory, plan: reconcile.Plan, outcome: Any) -> None:
        if outcome.job_gone or outcome.job_deleted:
            self.forget(key)
            return
        if outcome.status_written:
            memory.written_status = copy.deepcopy(plan.status)
            memory.written_at = time.monotonic()
        for action in outcome.done:
            if isinstance(action, reconcile.Delete) and action.kind == reconcile.KIND_POD:
                memory.deleting.add(action.name)
            elif isinstance(action, reconcile.MarkCounted):
                memory.counted[action.pod] = action.restarts

    async def _orphans(self, key: Key) -> None:
        """Children whose job is not indexed: delete them once the API confirms the job is gone."""
        _, pods, services, deployments = self.observed(key)
        if not (pods or services or deployments):
            return
        namespace, name = key
        if await asyncio.to_thread(self.kube.get, naming.KIND, namespace, name) is not None:
            return  # the index is behind: the job exists
        for list_kind, views in (("Pod", pods), ("Service", services), (None, deployments)):
            for view in views:
                kind = list_kind or view.kind  # Deployments and NetworkPolicies share a list
                if not view.terminating:
                    log.info("deleting %s %s/%s: its AgentsJob %s is gone", kind, namespace, view.name, name)
                    await asyncio.to_thread(self.kube.delete, kind, namespace, view.name)
        self.forget(key)

    def forget(self, key: Key) -> None:
        self.memory.pop(key, None)
        handle = self.wakeups.pop(key, None)
        if handle:
            handle.cancel()
        self.set_state(key, None)

    def set_state(self, key: Key, state: str | None) -> None:
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state
        if self.metrics:
            self.metrics.set_states(self.states.values())

    # --- background triggers -------------------------------------------------------------------------------

    def kick(self, key: Key) -> None:
        """Reconcile the job soon, in the background; many kicks while one runs cause one more run."""
        self.dirty.add(key)
        task = self.tasks.get(key)
        if task is None or task.done():
            self.tasks[key] = asyncio.get_running_loop().create_task(self._drain(key), name=f"reconcile {key}")

    async def _drain(self, key: Key) -> None:
        try:
            while key in self.dirty:
                try:
                    await self.reconcile(key)
                except Exception as err:  # one job's trouble never stops the operator
                    self.back_off(key, err)
        finally:
            self.tasks.pop(key, None)

    def back_off(self, key: Key, err: BaseException) -> None:
        """A reconcile failed: try again later, twice as late after each failure in a row (up to max_backoff)."""
        memory = self.memory.setdefault(key, JobMemory())
        memory.failures += 1
        delay = min(self.options.max_backoff, 0.5 * 2**memory.failures)
        if self.metrics:
            self.metrics.errors.inc()
        log.warning("reconcile of %s/%s failed (retry in %.1f s): %s", *key, delay, _brief(err))
        self.dirty.discard(key)
        self.wake_later(key, delay)

    def wake_later(self, key: Key, seconds: float) -> None:
        old = self.wakeups.pop(key, None)
        if old is not None and old.when() <= asyncio.get_running_loop().time() + seconds:
            self.wakeups[key] = old  # an earlier wake-up is already there
            return
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self.wakeups[key] = loop.call_later(max(seconds, 0.0) + 0.05, self._wake, key)

    def _wake(self, key: Key) -> None:
        self.wakeups.pop(key, None)
        self.kick(key)

    async def shutdown(self) -> None:
        for handle in self.wakeups.values():
            handle.cancel()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def resync_loop(self) -> None:
        """Every progress_interval: read the progress of running jobs and resync every job.

        One loop for all jobs rather than a kopf timer per job: kopf puts a finalizer on every object with a
        timer, and a finalizer would make jobs undeletable while the operator is down.
        """
        while True:
            await asyncio.sleep(self.options.progress_interval)
            jobs = self.indexes.get("agents_jobs")
            if jobs is None:
                continue
            keys = list(jobs.keys())
            await asyncio.gather(*(self._resync(key) for key in keys), return_exceptions=True)

    async def _resync(self, key: Key) -> None:
        try:
            await self.read_progress(key)
        finally:
            self.kick(key)  # catches anything a lost watch event would have told

    # --- progress ------------------------------------------------------------------------------------------

    async def _fetch_metrics(self, key: Key, url: str) -> bytes | None:
        """The chief's /metrics body, or None when unreadable: not up, not 200, too slow, or over METRICS_LIMIT."""
        try:
            timeout = aiohttp.ClientTimeout(total=self.options.metrics_timeout)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
                if response.status != 200:
                    return None
                body = await _read_capped(response, METRICS_LIMIT)
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            log.debug("metrics of %s/%s not read from %s: %s", *key, url, err)
            return None
        if body is None:
            log.warning("metrics of %s/%s at %s refused: larger than %d bytes", *key, url, METRICS_LIMIT)
        return body

    async def read_progress(self, key: Key) -> dict | None:
        """Read the chief's /metrics and patch status.progress when it changed; None when not running."""
        job, *_ = self.observed(key)
        if job is None:
            return None
        memory = self.memory.get(key)
        current = (memory.written_status if memory and memory.written_status else job.get("status")) or {}
        if current.get("state") not in ("Running", "Restarting"):
            return None
        try:
            parsed = api.parse_job({k: job[k] for k in ("apiVersion", "kind", "metadata", "spec")})
            port = parsed.trainer_config().metrics_port
        except (api.InvalidJob, KeyError, ValueError):
            return None
        if not port:
            return None
        body = await self._fetch_metrics(key, self.metrics_url(key[1], key[0], port))
        if body is None:
            return None
        now = self.now()
        # Parsed on a worker thread: a megabyte of samples would hold the event loop up.
        progress = await asyncio.to_thread(lambda: status.progress_from_metrics(body.decode("utf-8", "replace"), now))
        if progress is None:
            return None
        old = {k: v for k, v in (current.get("progress") or {}).items() if k != "updatedAt"}
        if old == {k: v for k, v in progress.items() if k != "updatedAt"}:
            return progress
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            written = await asyncio.to_thread(self.kube.patch_status, key[0], key[1], {"progress": progress})
            memory = self.memory.get(key)
            if written is not None and memory and memory.written_status is not None:
                memory.written_status["progress"] = progress
        return progress


class Refused(Exception):
    """The API server refused to create some of a job's children (reported; the reconcile is retried later)."""

    def __init__(self, refusals: list[reconcile.Refusal]):
        self.refusals = refusals
        names = ", ".join(f"{r.kind.lower()} {r.name}" for r in refusals)
        super().__init__(f"the API server refused {names}: {refusals[0].message}")


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is longer than `limit` bytes: then no more than about `limit` is read."""
    if (response.content_length or 0) > limit:
        return None
    body = bytearray()
    async for chunk in response.content.iter_chunked(METRICS_CHUNK):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _same_status(indexed: dict, written: dict) -> bool:
    """Whether the watch has caught up with our write (progress is written separately, so it is ignored)."""
    strip = {"progress"}
    return {k: v for k, v in indexed.items() if k not in strip} == {k: v for k, v in written.items() if k not in strip}


def _describe_action(action: reconcile.Action) -> str:
    match action:
        case reconcile.Create():
            return f"create {action.kind} {action.name}"
        case reconcile.Delete(kind=kind, name=name):
            return f"delete {kind} {name}"
        case reconcile.MarkCounted(pod=pod, restarts=n):
            return f"mark {pod} counted ({n})"
        case reconcile.WriteStatus(patch=patch):
            return f"write status {sorted(patch)}"
        case _:
            return type(action).__name__


def _brief(err: BaseException) -> str:
    return str(err) if isinstance(err, ApiError | OSError | Refused) else f"{type(err).__name__}: {err}"


# --- kopf handlers ---------------------------------------------------------------------------------------


def _job_value(body: kopf.Body) -> dict:
    """What the jobs index keeps of a job: the object without kopf's bookkeeping."""
    meta = body.get("metadata") or {}
    keep = ("name", "namespace", "uid", "generation", "labels", "annotations", "ownerReferences", "deletionTimestamp")
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": copy.deepcopy({k: meta[k] for k in keep if k in meta}),
        "spec": copy.deepcopy(dict(body.get("spec") or {})),
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }


def _spec_unobserved(body: kopf.Body) -> bool:
    generation = (body.get("metadata") or {}).get("generation")
    return generation is not None and generation != (body.get("status") or {}).get("observedGeneration")


def _key(body: kopf.Body) -> Key | None:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(naming.LABEL_JOB)
    return (meta.get("namespace") or "default", job) if job else None


def register(registry: kopf.OperatorRegistry, controller: Controller) -> None:
    """Every handler of the operator, on `registry`."""

    @kopf.index(*JOBS, id="agents_jobs", registry=registry)
    async def agents_jobs(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict:
        return {(namespace, name): _job_value(body)}

    @kopf.index("v1", "pods", labels=OURS, id="agents_pods", registry=registry)
    async def agents_pods(body: kopf.Body, **_: Any) -> dict:
        key, view = _key(body), status.view_pod(body)
        return {key: view} if key and view else {}

    @kopf.index("v1", "services", labels=OURS, id="agents_services", registry=registry)
    async def agents_services(body: kopf.Body, **_: Any) -> dict:
        key, view = _key(body), status.view_child(body)
        return {key: view} if key and view else {}

    @kopf.index("apps", "v1", "deployments", labels=OURS, id="agents_deployments", registry=registry)
    async def agents_deployments(body: kopf.Body, **_: Any) -> dict:
        key, view = _key(body), status.view_child(body)
        return {key: view} if key and view else {}

    @kopf.index(
        "networking.k8s.io", "v1", "networkpolicies", labels=OURS, id="agents_networkpolicies", registry=registry
    )
    async def agents_networkpolicies(body: kopf.Body, **_: Any) -> dict:
        key, view = _key(body), status.view_child(body)
        return {key: view} if key and view else {}

    @kopf.on.event(*JOBS, id="job-event", registry=registry)
    async def job_event(type: str | None, body: kopf.Body, namespace: str, name: str, **kwargs: Any) -> None:
        """A job listed at start-up, created, deleted, or with a spec not yet reconciled: reconcile it.

        No kopf create/update handlers: those keep state in annotations of every job (a patch each, and a
        diff of the whole job on every event); `metadata.generation` against `status.observedGeneration`
        tells a spec change apart from the operator's own status writes without either."""
        controller.remember_indexes(kwargs)
        key = (namespace, name)
        if type == "DELETED":
            controller.forget(key)
            controller.kick(key)  # the children of a job that is gone: cleaned up as orphans
        elif type in (None, "ADDED") or _spec_unobserved(body):
            controller.kick(key)

    async def _child_event(body: kopf.Body, kwargs: dict) -> None:
        controller.remember_indexes(kwargs)
        key = _key(body)
        if key:
            controller.kick(key)

    @kopf.on.event("v1", "pods", labels=OURS, id="pod-event", registry=registry)
    async def pod_event(body: kopf.Body, **kwargs: Any) -> None:
        await _child_event(body, kwargs)

    @kopf.on.event("v1", "services", labels=OURS, id="service-event", registry=registry)
    async def service_event(body: kopf.Body, **kwargs: Any) -> None:
        await _child_event(body, kwargs)

    @kopf.on.event("apps", "v1", "deployments", labels=OURS, id="deployment-event", registry=registry)
    async def deployment_event(body: kopf.Body, **kwargs: Any) -> None:
        await _child_event(body, kwargs)

    @kopf.on.event(
        "networking.k8s.io", "v1", "networkpolicies", labels=OURS, id="networkpolicy-event", registry=registry
    )
    async def networkpolicy_event(body: kopf.Body, **kwargs: Any) -> None:
        await _child_event(body, kwargs)

    @kopf.on.probe(id="jobs", registry=registry)
    async def jobs_probe(**_: Any) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in controller.states.values():
            counts[state or "Unknown"] = counts.get(state or "Unknown", 0) + 1
        return counts

    @kopf.on.cleanup(id="stop", registry=registry)
    async def stop(**_: Any) -> None:
        await controller.shutdown()
