"""The operator's controller: when to plan a job, one plan at a time, what it remembers between plans.

Nothing here decides the lifecycle: `reconcile.plan` does, from kopf's indexes (kept current from the
watches by `handlers`, the kopf glue; no listing here). What the controller adds is what a pure function
cannot know:

- one reconcile at a time per job (an asyncio lock), with bursts of kicks coalesced into one rerun;
- the operator's own recent writes, remembered until the watch delivers them (`JobMemory`), so that a stale
  cache neither counts a failure twice nor rewinds the status;
- errors: a job whose reconcile fails (children refused included: reported first) is retried with backoff;
  it never stops the others;
- the wake-up a plan asks for (deadline, TTL), a periodic resync that also reads the chief's progress;
- planning on a worker thread, with what the job's spec renders to kept per job (`JobMemory.desired`).

All of it lives in one `JobRecord` per job, dropped with the job (`forget`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from agents_operator import api, chiefmetrics, metrics_reader, naming, podview, reconcile, render
from agents_operator.jobrecord import MEMORY_SECONDS, JobMemory, JobRecord, caught_up
from agents_operator.kube import ApiError, Executed, Kube, PlanInterrupted
from agents_operator.peering import PeeringGate

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, job name)"""

INDEX_JOBS, INDEX_PODS, INDEX_SERVICES = "agents_jobs", "agents_pods", "agents_services"
INDEX_DEPLOYMENTS, INDEX_NETWORK_POLICIES = "agents_deployments", "agents_networkpolicies"
INDEX_CONFIG_MAPS = "agents_configmaps"
INDEXES = (INDEX_JOBS, INDEX_PODS, INDEX_SERVICES, INDEX_DEPLOYMENTS, INDEX_NETWORK_POLICIES, INDEX_CONFIG_MAPS)
"""kopf's indexes (their handler ids), each from (namespace, job name) to the values kept of its objects."""
OTHER_INDEXES = (INDEX_DEPLOYMENTS, INDEX_NETWORK_POLICIES, INDEX_CONFIG_MAPS)
"""The indexes of children that are neither pods nor Services, observed together by kind and name."""
Index = Mapping[Key, Iterable]


PROGRESS_INTERVAL = 5.0
"""Default seconds between progress reads: the pendulum example trains in under a minute on two cores, and its
Step and Score should move in `kubectl get aj` meanwhile. A read is one GET to the chief and, when the numbers
moved, one status patch."""
RESYNC_INTERVAL = 30.0
"""Default seconds between resyncs of every job."""
EVENTS_TTL = 10.0
"""Seconds the Events read for a waiting pod are reused by later reconciles before being read again."""


@dataclass
class ControllerOptions:
    render: render.RenderOptions = field(default_factory=render.RenderOptions)
    allow_privileged: bool = False
    """Run jobs with spec.podSecurity Privileged (--allow-privileged-jobs); else they fail unrendered."""
    progress_interval: float = PROGRESS_INTERVAL
    """Seconds between reads of each running job's chief's /metrics."""
    resync_interval: float = RESYNC_INTERVAL
    """Seconds between resyncs of every job (a plan, whatever the watches told)."""
    metrics_timeout: float = 5.0
    max_backoff: float = 60.0


def _now() -> datetime:
    return datetime.now(UTC)


def _first(index: Index | None, key: Key) -> Any:
    if index is None:
        return None
    try:
        store = index[key]
    except KeyError:
        return None
    for value in store:
        return value
    return None


def _all(index: Index | None, key: Key) -> list:
    if index is None:
        return []
    try:
        return list(index[key])
    except KeyError:
        return []


class Controller:
    """Reconciles jobs: serialised per job, coalesced, retried, with metrics."""

    def __init__(
        self,
        kube: Kube,
        options: ControllerOptions | None = None,
        metrics: Any = None,
        peers: PeeringGate | None = None,
    ):
        self.kube = kube
        self.peers = peers
        self.options = options or ControllerOptions()
        self.metrics = metrics
        self.indexes: dict[str, Index] = {}
        self.jobs: dict[Key, JobRecord] = {}
        self.metrics_url: Callable[[str, str, int], str] = chiefmetrics.metrics_url
        self.now: Callable[[], datetime] = _now

    # --- records -------------------------------------------------------------------------------------------

    def record(self, key: Key) -> JobRecord:
        rec = self.jobs.get(key)
        if rec is None:
            rec = self.jobs[key] = JobRecord()
        return rec

    def task(self, key: Key) -> asyncio.Task | None:
        """The task reconciling the job now, if one is."""
        rec = self.jobs.get(key)
        return rec.task if rec is not None else None

    def states(self) -> list[str | None]:
        return [rec.state for rec in self.jobs.values() if rec.state is not None]

    @contextlib.asynccontextmanager
    async def locked(self, key: Key) -> AsyncIterator[JobRecord]:
        """The job's record, under its lock."""
        rec = self.record(key)
        rec.users += 1
        try:
            async with rec.lock:
                yield rec
        finally:
            rec.users -= 1
            self._drop(key, rec)

    def forget(self, key: Key) -> None:
        """The job is gone: its memory, wake-up and state go now, its record (and lock) once nothing uses it."""
        rec = self.jobs.get(key)
        if rec is None:
            return
        rec.memory = JobMemory()
        if rec.wakeup is not None:
            rec.wakeup.cancel()
            rec.wakeup = None
        rec.forgotten = True
        self.set_state(rec, None)
        self._drop(key, rec)

    def _drop(self, key: Key, rec: JobRecord) -> None:
        if rec.forgotten and not rec.dirty and not rec.busy and self.jobs.get(key) is rec:
            del self.jobs[key]

    def set_state(self, rec: JobRecord, state: str | None) -> None:
        rec.state = state
        if self.metrics:
            self.metrics.set_states(self.states())

    # --- indexes -------------------------------------------------------------------------------------------

    def remember_indexes(self, kwargs: dict[str, Any]) -> None:
        for name in INDEXES:
            if name in kwargs:
                self.indexes[name] = kwargs[name]

    def observed(self, key: Key) -> tuple[dict | None, list, list, list]:
        job = _first(self.indexes.get(INDEX_JOBS), key)
        return (
            copy.deepcopy(job) if job else None,
            _all(self.indexes.get(INDEX_PODS), key),
            _all(self.indexes.get(INDEX_SERVICES), key),
            # Deployments, NetworkPolicies and the ConfigMap: the plan only needs their kind and name.
            [view for index in OTHER_INDEXES for view in _all(self.indexes.get(index), key)],
        )

    # --- reconcile ---------------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> reconcile.Plan | None:
        """Plan and execute for one job; raises on API errors (the caller retries)."""
        async with self.locked(key) as rec:
            rec.dirty = False
            job, pods, services, deployments = self.observed(key)
            if job is None:
                if await self._orphans(key):
                    self.forget(key)
                return None
            rec.forgotten = False
            job, pods = self._overlay(job, pods, rec.memory)
            pods = await self._explain(key, rec.memory, pods)
            started = time.perf_counter()
            plan = await self.plan(job, pods, services, deployments, rec.memory.desired)
            if plan.actions and log.isEnabledFor(logging.DEBUG):  # a large job's plan is thousands of actions
                log.debug("%s/%s: %s", *key, ", ".join(reconcile.describe_action(a) for a in plan.actions))
            outcome = await self._execute(key, rec, job, plan)
            if self.metrics:
                self.metrics.observe(plan, outcome, time.perf_counter() - started)
            return await self._after(key, rec, job, plan, outcome)

    async def _execute(self, key: Key, rec: JobRecord, job: dict, plan: reconcile.Plan) -> Executed:
        try:
            executed = await asyncio.to_thread(self.kube.execute, job, plan, self.now())
        except PlanInterrupted as stopped:
            self._learn(key, rec.memory, plan, stopped.executed)  # what did happen must not happen twice
            raise stopped.cause from None
        self._learn(key, rec.memory, plan, executed)
        return executed

    async def _after(
        self, key: Key, rec: JobRecord, job: dict, plan: reconcile.Plan, outcome: Executed
    ) -> reconcile.Plan:
        """Refusals reported, the state and the wake-up the plan asks for kept; Refused raised for a retry."""
        gone = outcome.job_gone or outcome.job_deleted
        if outcome.refused and not gone:
            plan = await self._report_refusals(key, job, plan, outcome.refused, rec.memory)
        self.set_state(rec, None if gone else plan.status.get("state"))
        if plan.requeue_after is not None and not gone:
            self.wake_later(key, plan.requeue_after)
        if outcome.refused and not gone:
            raise Refused(outcome.refused)
        rec.memory.failures = 0
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
            if stale or caught_up(indexed_status, memory.written_status):
                memory.written_status = None
            else:
                job["status"] = copy.deepcopy(memory.written_status)
        names = {p.name for p in pods}
        memory.deleting &= names
        memory.counted = {
            n: v for n, v in memory.counted.items() if n in names and not any(p.name == n and p.counted for p in pods)
        }
        return job, podview.overlay(pods, memory.deleting, memory.counted)

    async def _explain(self, key: Key, memory: JobMemory, pods: list) -> list:
        """Pods Pending for a while with nothing said in their status, with the reason their Events give (a
        volume the kubelet cannot mount, a sandbox it cannot create: the status says only ContainerCreating).
        Events are read only for such pods, once per EVENTS_TTL s each."""
        now, clock = self.now(), time.monotonic()
        waiting = {p.name for p in pods if podview.unexplained(p, now)}
        memory.pod_events = {name: read for name, read in memory.pod_events.items() if name in waiting}
        read_at = {name: at for name, (at, _) in memory.pod_events.items()}
        stale = sorted(n for n in waiting if n not in read_at or clock - read_at[n] >= EVENTS_TTL)
        if stale:
            found = await asyncio.to_thread(self.kube.pod_events, key[0], stale)
            memory.pod_events.update({name: (clock, events) for name, events in found.items()})
        return [podview.explained(p, memory.pod_events[p.name][1], now) if p.name in waiting else p for p in pods]

    def _learn(self, key: Key, memory: JobMemory, plan: reconcile.Plan, outcome: Executed) -> None:
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

    async def _orphans(self, key: Key) -> bool:
        """Children whose job is not indexed: delete them once the API confirms the job is gone. False when
        the job exists after all (the index is behind)."""
        _, pods, services, deployments = self.observed(key)
        if not (pods or services or deployments):
            return True
        namespace, name = key
        if await asyncio.to_thread(self.kube.get, naming.KIND, namespace, name) is not None:
            return False
        for list_kind, views in (("Pod", pods), ("Service", services), (None, deployments)):
            for view in views:
                kind = list_kind or view.kind  # the OTHER_INDEXES share a list
                if not view.terminating:
                    log.info("deleting %s %s/%s: its AgentsJob %s is gone", kind, namespace, view.name, name)
                    await asyncio.to_thread(self.kube.delete, kind, namespace, view.name)
        return True

    # --- background triggers -------------------------------------------------------------------------------

    def kick(self, key: Key, watched: bool = True) -> None:
        """Reconcile the job soon, in the background; many kicks while one runs cause one more run. `watched`:
        a watch event asked (kopf delivers those only while this replica serves); else the peering is asked."""
        rec = self.record(key)
        rec.dirty = True
        rec.watched = rec.watched or watched
        if rec.task is None or rec.task.done():
            rec.task = asyncio.get_running_loop().create_task(self._drain(key, rec), name=f"reconcile {key}")

    async def _drain(self, key: Key, rec: JobRecord) -> None:
        try:
            while rec.dirty:
                if not (rec.watched or await self.serves(key) or rec.watched):  # a watch may kick meanwhile
                    rec.dirty = False
                    break
                rec.watched = False
                try:
                    await self.reconcile(key)
                except Exception as err:  # one job's trouble never stops the operator
                    self.back_off(key, err)
        finally:
            rec.task = None
            self._drop(key, rec)

    async def serves(self, key: Key) -> bool:
        """Whether this replica serves the job's namespace now (peering; always when standalone)."""
        return self.peers is None or await self.peers.serves(key[0])

    def back_off(self, key: Key, err: BaseException) -> None:
        """A reconcile failed: try again later, twice as late after each failure in a row (up to max_backoff)."""
        rec = self.record(key)
        rec.memory.failures += 1
        delay = min(self.options.max_backoff, 0.5 * 2**rec.memory.failures)
        if self.metrics:
            self.metrics.errors.inc()
        log.warning("reconcile of %s/%s failed (retry in %.1f s): %s", *key, delay, _brief(err))
        rec.dirty = False
        self.wake_later(key, delay)

    def wake_later(self, key: Key, seconds: float) -> None:
        rec = self.record(key)
        loop = asyncio.get_running_loop()
        if rec.wakeup is not None and rec.wakeup.when() <= loop.time() + seconds:
            return  # an earlier wake-up is already there
        if rec.wakeup is not None:
            rec.wakeup.cancel()
        rec.wakeup = loop.call_later(max(seconds, 0.0) + 0.05, self._wake, key)

    def _wake(self, key: Key) -> None:
        rec = self.jobs.get(key)
        if rec is not None:
            rec.wakeup = None
        self.kick(key, watched=False)

    async def shutdown(self) -> None:
        tasks = []
        for rec in self.jobs.values():
            if rec.wakeup is not None:
                rec.wakeup.cancel()
            if rec.task is not None:
                rec.task.cancel()
                tasks.append(rec.task)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def resync_loop(self) -> None:
        """Every resync_interval: plan every job again, which catches anything a lost watch event would have told.

        One loop for all jobs rather than a kopf timer per job: kopf puts a finalizer on every object with a
        timer, and a finalizer would make jobs undeletable while the operator is down.
        """
        while True:
            await asyncio.sleep(self.options.resync_interval)
            for key in list((self.indexes.get(INDEX_JOBS) or {}).keys()):
                self.kick(key, watched=False)

    async def progress_loop(self) -> None:
        """Every progress_interval: read the progress of the running jobs (`read_progress` skips the others)."""
        while True:
            await asyncio.sleep(self.options.progress_interval)
            keys = [key for key in list((self.indexes.get(INDEX_JOBS) or {}).keys()) if await self.serves(key)]
            await asyncio.gather(*(self.read_progress(key) for key in keys), return_exceptions=True)

    # --- progress ------------------------------------------------------------------------------------------

    async def read_progress(self, key: Key) -> dict | None:
        """Read the chief's /metrics and patch status.progress when it changed; None when not running."""
        job, *_ = self.observed(key)
        if job is None:
            return None
        rec = self.jobs.get(key)
        written = rec.memory.written_status if rec is not None else None
        current = (written or job.get("status")) or {}
        if current.get("state") not in (api.RUNNING, api.RESTARTING):
            return None
        port = metrics_reader.metrics_port(job)
        url = self.metrics_url(key[1], key[0], port) if port else None
        body = await metrics_reader.fetch(url, self.options.metrics_timeout, f"{key[0]}/{key[1]}") if url else None
        if body is None:
            return None
        now = self.now()
        # Parsed on a worker thread: a megabyte of samples would hold the event loop up.
        progress = await asyncio.to_thread(
            lambda: chiefmetrics.progress_from_metrics(body.decode("utf-8", "replace"), now)
        )
        if progress is None:
            return None
        old = {k: v for k, v in (current.get("progress") or {}).items() if k != "updatedAt"}
        if old != {k: v for k, v in progress.items() if k != "updatedAt"}:
            await self._write_progress(key, progress)
        return progress

    async def _write_progress(self, key: Key, progress: dict) -> None:
        async with self.locked(key) as rec:
            written = await asyncio.to_thread(self.kube.patch_status, key[0], key[1], {"progress": progress})
            if written is not None and rec.memory.written_status is not None:
                rec.memory.written_status["progress"] = progress


class Refused(Exception):
    """The API server refused to create some of a job's children (reported; the reconcile is retried later)."""

    def __init__(self, refusals: list[reconcile.Refusal]):
        self.refusals = refusals
        names = ", ".join(f"{r.kind.lower()} {r.name}" for r in refusals)
        super().__init__(f"the API server refused {names}: {refusals[0].message}")


def _brief(err: BaseException) -> str:
    return str(err) if isinstance(err, ApiError | OSError | Refused) else f"{type(err).__name__}: {err}"
