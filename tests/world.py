"""Plain-dict jobs and pods, and a tiny in-memory cluster that applies plans: for table tests of reconcile."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from agents_operator import jobstatus, naming, podview, reconcile, render

NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
UID = "00000000-0000-4000-8000-0000000000aa"


def make_job(
    name: str = "pj",
    *,
    ps: int = 1,
    workers: int = 2,
    evaluator: bool = False,
    restart: str = "OnFailure",
    ps_restart: str | None = None,
    backoff: int = 3,
    success: str = "ChiefWorker",
    clean: str = "Running",
    ttl: int | None = None,
    deadline: int | None = None,
    suspend: bool = False,
    preset: str = "pendulum",
    tensorboard: bool = False,
    uid: str | None = UID,
    job_status: dict | None = None,
    environments: dict | None = None,
    claim: str | None = None,
    elastic: dict | None = None,
) -> dict:
    """A job as the API server stores it. `elastic` ({minWorkers, maxWorkers}) also sets trainer.mode async."""
    specs: dict[str, Any] = {"worker": {"replicas": workers, "restartPolicy": restart}}
    if ps:
        specs["ps"] = {"replicas": ps, "restartPolicy": ps_restart or restart}
    if evaluator:
        specs["evaluator"] = {"replicas": 1, "restartPolicy": restart}
    run_policy: dict[str, Any] = {"backoffLimit": backoff, "cleanPodPolicy": clean, "suspend": suspend}
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    if deadline is not None:
        run_policy["activeDeadlineSeconds"] = deadline
    spec: dict[str, Any] = {
        "trainer": {"preset": preset},
        "replicaSpecs": specs,
        "runPolicy": run_policy,
        "successPolicy": success,
    }
    if tensorboard:
        spec["tensorboard"] = {"enabled": True}
    if elastic is not None:
        spec["elastic"] = elastic
        spec["trainer"]["mode"] = "async"
    if environments is not None:
        spec["environments"] = environments
    if tensorboard or evaluator:  # both read the run directory from a shared claim
        claim = claim or "runs"
    if claim:
        spec["storage"] = {"persistentVolumeClaim": {"claimName": claim}}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "generation": 1}
    if uid:
        meta["uid"] = uid
    job = {"apiVersion": naming.API_VERSION, "kind": naming.KIND, "metadata": meta, "spec": spec}
    if job_status is not None:
        job["status"] = job_status
    return job


def make_pod(
    job: str,
    replica_type: str,
    index: int,
    phase: str = "Running",
    *,
    exit_code: int | None = None,
    reason: str | None = None,
    deleting: bool = False,
    counted: int | None = None,
    owner: str | None = UID,
) -> dict:
    meta: dict[str, Any] = {
        "name": naming.child_name(job, replica_type, index),
        "namespace": "ns",
        "labels": naming.replica_labels(job, replica_type, index),
    }
    if owner:
        meta["ownerReferences"] = [{"kind": naming.KIND, "name": job, "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T11:59:00Z"
    if counted is not None:
        meta["annotations"] = {podview.ANNOTATION_COUNTED: str(counted)}
    pod_status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        pod_status["containerStatuses"] = [
            {"name": "agents", "state": {"terminated": {"exitCode": exit_code, "reason": reason or "Error"}}}
        ]
    elif reason:
        pod_status["reason"] = reason
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": pod_status}


class World:
    """A namespace with one job: plans with a `DesiredCache` as the operator does, applies plans the way
    kube.execute does, and lets tests move pods (and change the spec in place)."""

    def __init__(self, job: dict, *, graceful: bool = False):
        self.job: dict | None = job
        self.pods: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.deployments: dict[str, dict] = {}
        self.network_policies: dict[str, dict] = {}
        self.config_maps: dict[str, dict] = {}
        self.graceful = graceful  # deletes leave a terminating pod (a kubelet) instead of removing it
        self.now = NOW
        self.log: list[reconcile.Action] = []
        self.events: list[reconcile.Event] = []
        self.cache = reconcile.DesiredCache()

    @property
    def name(self) -> str:
        assert self.job is not None
        return self.job["metadata"]["name"]

    @property
    def status(self) -> dict:
        assert self.job is not None
        return self.job.get("status") or {}

    def plan(self) -> reconcile.Plan:
        assert self.job is not None
        return reconcile.plan(
            copy.deepcopy(self.job),
            list(self.pods.values()),
            list(self.services.values()),
            # other children go in with the Deployments, each object carrying its own kind (as handlers do)
            [*self.deployments.values(), *self.network_policies.values(), *self.config_maps.values()],
            now=self.now,
            cache=self.cache,
        )

    def apply(self, plan: reconcile.Plan, upto: int | None = None) -> None:
        """Execute the plan's actions (the first `upto` only: an operator that stopped half-way)."""
        for action in plan.actions[:upto]:
            self.log.append(action)
            self._apply(action)
        if upto is None:
            self.events += plan.events

    def _apply(self, action: reconcile.Action) -> None:
        assert self.job is not None
        store = {
            "Pod": self.pods,
            "Service": self.services,
            "Deployment": self.deployments,
            "NetworkPolicy": self.network_policies,
            "ConfigMap": self.config_maps,
        }
        match action:
            case reconcile.Create(obj=obj):
                target = store[action.kind]
                if action.name not in target:  # else: 409, already there
                    obj = copy.deepcopy(obj)
                    if action.kind == "Pod":
                        obj["status"] = {"phase": "Pending"}
                    target[action.name] = obj
            case reconcile.Delete(kind=kind, name=name, grace_seconds=grace):
                target = store[kind]
                if name in target:
                    if self.graceful and kind == "Pod" and grace != 0:
                        target[name]["metadata"]["deletionTimestamp"] = jobstatus.timestamp(self.now)
                    else:
                        del target[name]
            case reconcile.MarkCounted(pod=pod, restarts=n):
                annotations = self.pods[pod]["metadata"].setdefault("annotations", {})
                annotations[podview.ANNOTATION_COUNTED] = str(n)
            case reconcile.WriteStatus(patch=patch):
                merged = dict(self.job.get("status") or {})
                for key, value in patch.items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                self.job["status"] = merged
            case reconcile.DeleteJob():
                self.job = None

    def step(self, minutes: float = 0) -> reconcile.Plan:
        self.now += timedelta(minutes=minutes)
        plan = self.plan()
        self.apply(plan)
        return plan

    def settle(self, max_steps: int = 10) -> None:
        """Plan and apply until the plan does nothing."""
        for _ in range(max_steps):
            if self.job is None or not self.step().actions:
                return
        raise AssertionError("reconcile does not converge")

    def set_phase(self, pod: str, phase: str, exit_code: int | None = None, reason: str | None = None) -> None:
        p = self.pods[pod]
        p["status"] = {"phase": phase}
        if exit_code is not None:
            p["status"]["containerStatuses"] = [
                {"name": "agents", "state": {"terminated": {"exitCode": exit_code, "reason": reason or "Error"}}}
            ]
        elif reason:
            p["status"]["reason"] = reason

    def run_all(self) -> None:
        for name in self.pods:
            if self.pods[name]["status"]["phase"] == "Pending":
                self.set_phase(name, "Running")

    def finish_terminating(self) -> None:
        """The kubelet is done: terminating pods go away."""
        for name in [n for n, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]:
            del self.pods[name]

    def pod(self, replica_type: str, index: int) -> str:
        return naming.child_name(self.name, replica_type, index)

    def condition(self, type_: str) -> dict | None:
        return next((c for c in self.status.get("conditions", []) if c["type"] == type_), None)

    def started(self) -> None:
        """Create the children and bring every pod to Running."""
        self.settle()
        self.run_all()
        self.settle()


def expected_children(job: dict) -> set[tuple[str, str]]:
    from agents_operator import api

    parsed = api.parse_job(job)
    return {(o["kind"], o["metadata"]["name"]) for o in render.children(parsed)}
