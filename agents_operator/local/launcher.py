"""The executor of the operator's plan over local processes: `Launcher` observes a job's processes as pods,
plans with `reconcile.plan` and carries the plan out (Create a pod -> start its processes, Delete -> stop
them), so restart policies, backoffLimit, activeDeadlineSeconds, the success policy, the reasons and the
conditions are the operator's, and so is the status it writes. Progress comes from the chief's /metrics, as
it does for the operator.
"""

from __future__ import annotations

import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import yaml

from agents_operator import api, chiefmetrics, naming, podview, reconcile, scrape
from agents_operator.api import AgentsJob
from agents_operator.local import console, kubelet, scaling
from agents_operator.local.kubelet import STOP_GRACE_SECONDS, ProcessPod
from agents_operator.local.processes import (
    LOOPBACK,
    Replica,
    check_resume,
    free_port,
    member_ports,
    plan,
    prepare_logdir,
    write_cluster,
)
from agents_operator.reconcile import conditions, rules
from agents_operator.trainer import rundir

POLL_SECONDS = 0.5
METRICS_SECONDS = 2.0
STATUS_FILE = "status.yaml"
"""In the run directory's logs: the job's status as the operator would write it."""


class Launcher:
    """Runs one job as local processes, as the operator would run its pods.

    `status` is what the operator would write into the job's status; each change is also written to
    `logs/status.yaml` in the run directory, and the plan's Events are printed as they come.
    """

    def __init__(self, job: AgentsJob, logdir: Path, out: TextIO = sys.stderr, video: bool = True):
        self.job = job
        self.manifest = job.model_dump(by_alias=True, exclude_none=True, mode="json")
        """The job as the operator reads it from the API server."""
        self.logdir = logdir
        self.metrics_port = free_port()
        self.video = video
        self.ports = member_ports(job)
        """The local port of each member of the cluster, for the job's life (a scale keeps them)."""
        self.replicas = plan(job, logdir, ports=self.ports, metrics_port=self.metrics_port, video=video)
        self.metrics_url = f"http://{LOOPBACK}:{self.metrics_port}/metrics"
        self.slots = {naming.child_name(job.name, t, i): (t, i) for t, i in job.topology.slots()}
        self.pods: dict[tuple[str, int], ProcessPod] = {}
        self.children: dict[tuple[str, str], podview.ChildView] = {}
        """The pod-less children the plan created (Services, TensorBoard): nothing runs for them here."""
        self.status: dict = {}
        self.desired = reconcile.DesiredCache()
        self.since = time.time()
        """Wall time of the start: files older than this in the run directory are a previous run's."""
        self.failed: Replica | None = None
        """The main process of the pod whose failure ended the job, if one did."""
        self.tracker = console.Tracker(job.config.total_steps, out)

    @property
    def restarts(self) -> int:
        return self.status.get("restarts", 0)

    def stop_all(self, grace: float = STOP_GRACE_SECONDS) -> None:
        kubelet.stop_all(self.replicas, grace)

    def observe(self) -> list[podview.PodView]:
        """The job's pods as the operator would see them; deleted pods whose processes are gone are dropped."""
        views = []
        for name, slot in self.slots.items():
            pod = self.pods.get(slot)
            if pod is None:
                continue
            if not pod.tend(self.tracker.say):
                del self.pods[slot]
                continue
            views.append(pod.view(name, slot))
        return views

    def step(self, now: datetime | None = None) -> reconcile.Plan:
        """Observe, plan as the operator does, execute; the plan (its status is the job's new status)."""
        plan_ = reconcile.plan(
            {**self.manifest, "status": self.status},
            self.observe(),
            list(self.children.values()),
            now=now or datetime.now(UTC),
            cache=self.desired,
            allow_privileged=True,  # no Pod Security here: the processes run as the user who starts them
        )
        if plan_.outcome is not None and plan_.outcome.pod is not None:
            self.failed = self.pods[self.slots[plan_.outcome.pod]].main
        for action in plan_.actions:
            self._execute(action)
        for event in plan_.events:
            self.tracker.say(f"{event.reason}: {event.message}")
        return plan_

    def _execute(self, action: reconcile.Action) -> None:
        match action:
            case reconcile.Create() if action.kind == reconcile.KIND_POD:
                slot = self.slots[action.name]
                if slot not in self.pods:  # else already there, as a 409 would say
                    self.pods[slot] = ProcessPod([r for r in self.replicas if (r.type, r.index) == slot])
            case reconcile.Create():
                if action.kind == reconcile.KIND_CONFIG_MAP:
                    write_cluster(action.obj, self.logdir, self.ports)
                self.children[action.kind, action.name] = podview.ChildView(action.kind, action.name)
            case reconcile.Delete(kind=reconcile.KIND_POD, name=name, grace_seconds=grace):
                if (pod := self.pods.get(self.slots[name])) is not None:
                    pod.delete(STOP_GRACE_SECONDS if grace is None else grace)
            case reconcile.Delete(kind=kind, name=name):
                self.children.pop((kind, name), None)
            case reconcile.MarkCounted(pod=name, restarts=restarts):
                self.pods[self.slots[name]].counted = restarts
            case reconcile.WriteStatus(patch=patch):
                self._write_status(patch)
            case reconcile.DeleteJob():
                pass  # the launcher ends with the job, before its TTL

    def scale(self, workers: int) -> None:
        """Run the job with `workers` workers from now on (`agents-operator scale`); the plan then adds or
        removes the pods. A count the job's rules refuse is said on the console, and nothing changes."""
        try:
            job = scaling.scaled(self.manifest, workers)
        except api.InvalidJob as err:
            self.tracker.say(f"scale to {workers} worker(s) refused: {err}")
            return
        self.job, self.manifest = job, job.model_dump(by_alias=True, exclude_none=True, mode="json")
        have = {(r.type, r.index) for r in self.replicas}  # a slot scaled away and back reuses its processes
        new = plan(job, self.logdir, ports=self.ports, metrics_port=self.metrics_port, video=self.video)
        self.replicas += [r for r in new if (r.type, r.index) not in have]
        self.slots.update({naming.child_name(job.name, t, i): (t, i) for t, i in job.topology.slots()})
        scaling.write_job(self.logdir, self.manifest)

    def _write_status(self, patch: dict) -> None:
        self.status = {**self.status, **patch}
        for key in [k for k, v in patch.items() if v is None]:
            del self.status[key]
        path = self.logdir / rundir.LOGS / STATUS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.status, sort_keys=False))

    def _progress(self, metrics: dict[str, float] | None) -> None:
        """The chief's metrics on the console, and in the status file's `progress` as the operator writes it."""
        self.tracker.update(metrics)
        progress = chiefmetrics.progress_from_samples(metrics, datetime.now(UTC)) if metrics else None
        old = {k: v for k, v in (self.status.get("progress") or {}).items() if k != "updatedAt"}
        if progress and {k: v for k, v in progress.items() if k != "updatedAt"} != old:
            self._write_status({"progress": progress})

    def outcome(self) -> rules.Outcome | None:
        """How the job ended (Succeeded, Failed, or Suspended, which runs nothing here); None while it runs."""
        return conditions.ended(self.status)

    def run(self) -> rules.Outcome:
        """Run the job to its end; the outcome is the condition that ended it."""
        self.since = time.time()
        last_metrics = 0.0
        scaling.take(self.logdir)  # a request no launcher took, left by an earlier run
        scaling.write_job(self.logdir, self.manifest)
        try:
            while True:
                if (workers := scaling.take(self.logdir)) is not None:
                    self.scale(workers)
                plan_ = self.step()
                outcome = self.outcome()
                if outcome is not None:
                    return outcome
                if plan_.actions:
                    continue  # what the plan changed is observed at once, as the operator's watch tells it
                if time.monotonic() - last_metrics >= METRICS_SECONDS:
                    last_metrics = time.monotonic()
                    self._progress(scrape.scrape(self.metrics_url))
                time.sleep(POLL_SECONDS)
        finally:
            self._progress(scrape.scrape(self.metrics_url))
            self.stop_all()
            self.tracker.finish(self.logdir, self.since)

    def closing_lines(self, outcome: rules.Outcome | None) -> list[str]:
        """The console's last words on this run (`console.closing_lines`)."""
        failed = (self.failed.name, self.failed.log_path) if self.failed else None
        return console.closing_lines(outcome, self.logdir, self.since, self.tracker.summary(), failed)


def run_local(job: AgentsJob, logdir: Path, video: bool = True, out: TextIO = sys.stderr) -> int:
    """Run `job` here; 0 only when it succeeded. LaunchError when its run directory is unusable, or holds a
    run that `job` may not resume."""
    prepare_logdir(logdir)
    check_resume(job, logdir, video)
    launcher = Launcher(job, logdir, out, video=video)
    servers = sum(1 for r in launcher.replicas if r.type == naming.ENV_SERVER or r.sidecar)
    print(console.opening_line(job, servers, logdir), file=out)

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcome = launcher.run()
    except KeyboardInterrupt:
        outcome = None
    finally:
        signal.signal(signal.SIGTERM, previous)
    for line in launcher.closing_lines(outcome):
        print(line, file=out)
    if outcome is None:
        return 130
    return 0 if outcome.succeeded else 1
