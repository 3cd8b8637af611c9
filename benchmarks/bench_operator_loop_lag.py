"""Operator event loop: its lag and the CPU per reconcile while a 999 ps + 999 worker job is reconciled; one JSON line.

    python benchmarks/bench_operator_loop_lag.py
    python benchmarks/bench_operator_loop_lag.py --ps 99 --workers 99 --events 400

Drives `controller.Controller` without an API server: kopf's indexes are stand-ins that the benchmark's
"watch" changes, and a fake Kube applies each plan to them as the API server's watch would echo it.
Two phases per mode, the lag measured by the operator's own `monitor_loop_lag` (a 10 ms interval here):
- create: the job exists, nothing else; one reconcile creates every Service and pod;
- burst: one pod event every 2 ms, as a kubelet starting the pods would send them (each pod turns
  Running; every 250th event a running pod fails instead and is replaced). Events coalesce as in the
  operator: CPU per reconcile is the process's CPU time over the burst divided by the plans executed.
Modes: the Controller as it is (plan on a worker thread, a DesiredCache per job), and the baseline in the
same run: plan on the event loop with no cache. Ratios are baseline / as is. Goal: max lag < 0.1 s.
The heap is settled first, as `agents-operator run` does (`operator_main.settle_heap`), for both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents_operator import naming, operator_main, podview, reconcile  # noqa: E402
from agents_operator.controller import Controller  # noqa: E402
from agents_operator.kube import Executed  # noqa: E402

KEY = ("bench", "big")
UID = "00000000-0000-4000-8000-00000000b1c0"
PACE = 0.002
"""Seconds between pod events in the burst."""
FAIL_EVERY = 250
LAG_INTERVAL = 0.01


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))] if values else float("nan")


def job_manifest(ps: int, workers: int) -> dict:
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": KEY[1], "namespace": KEY[0], "uid": UID, "generation": 1},
        "spec": {
            "trainer": {"preset": "pendulum"},
            "replicaSpecs": {"ps": {"replicas": ps}, "worker": {"replicas": workers}},
            "runPolicy": {"backoffLimit": 1000},
        },
    }


class Store:
    """One job's entry in a kopf index: views by name, changed by the watch stand-in (on the loop) and by
    the fake Kube (on a worker thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, object] = {}

    def __iter__(self):
        with self.lock:
            return iter(list(self.items.values()))

    def put(self, name: str, view: object) -> None:
        with self.lock:
            self.items[name] = view

    def pop(self, name: str) -> None:
        with self.lock:
            self.items.pop(name, None)

    def get(self, name: str):
        with self.lock:
            return self.items.get(name)


class EchoKube:
    """Executes a plan by changing the index stand-ins, as the watch would report the API server's changes."""

    def __init__(self, pods: Store, services: Store, others: Store) -> None:
        self.pods, self.services, self.others, self.plans = pods, services, others, 0

    def execute(self, job: dict, plan: reconcile.Plan, now=None) -> Executed:
        self.plans += 1
        outcome = Executed()
        for action in plan.actions:
            match action:
                case reconcile.Create(obj=obj) if action.kind == reconcile.KIND_POD:
                    self.pods.put(action.name, podview.view_pod(obj))
                case reconcile.Create(obj=obj):
                    store = self.services if action.kind == reconcile.KIND_SERVICE else self.others
                    store.put(action.name, podview.view_child(obj))
                case reconcile.Delete(kind=reconcile.KIND_POD, name=name):
                    self.pods.pop(name)
                case reconcile.MarkCounted(pod=pod, restarts=n):
                    self.pods.put(pod, replace(self.pods.get(pod), counted=n))
                case reconcile.WriteStatus():
                    outcome.status_written = True  # the Controller's memory stands for the job's watch
            outcome.done.append(action)
        return outcome


class OnTheLoop(Controller):
    """The baseline: reconcile.plan on the event loop, nothing kept between plans."""

    async def plan(self, job, pods, services, deployments, cache):
        return reconcile.plan(job, pods, services, deployments, now=self.now(), options=self.options.render)


async def settle(controller: Controller) -> None:
    while (task := controller.task(KEY)) is not None:
        await task


async def burst(controller: Controller, pods: Store, events: int) -> None:
    names = sorted(pods.items)
    for n in range(events):
        name = names[n % len(names)]
        view = pods.get(name)
        if view is None:
            continue
        phase = "Failed" if n % FAIL_EVERY == FAIL_EVERY - 1 and view.phase == "Running" else "Running"
        pods.put(name, replace(view, phase=phase, exit_code=137 if phase == "Failed" else None))
        controller.kick(KEY)
        await asyncio.sleep(PACE)
    await settle(controller)


async def measured(phase) -> tuple[dict, float]:
    """Run `phase()`; its loop lag (max, p99) and the process CPU seconds it took."""
    lags: list[float] = []
    monitor = asyncio.create_task(operator_main.monitor_loop_lag(lags.append, LAG_INTERVAL))
    await asyncio.sleep(0)
    cpu = time.process_time()
    await phase()
    cpu = time.process_time() - cpu
    await asyncio.sleep(2 * LAG_INTERVAL)  # a hold-up at the very end shows at the monitor's next wake-up
    monitor.cancel()
    return {"max_lag_s": round(max(lags), 4), "p99_lag_s": round(percentile(lags, 0.99), 4)}, cpu


async def run_mode(cls: type[Controller], ps: int, workers: int, events: int) -> dict:
    pods, services, others = Store(), Store(), Store()
    kube = EchoKube(pods, services, others)
    controller = cls(kube)  # type: ignore[arg-type]
    controller.indexes = {
        "agents_jobs": {KEY: [job_manifest(ps, workers)]},
        "agents_pods": {KEY: pods},
        "agents_services": {KEY: services},
        "agents_deployments": {},
        "agents_networkpolicies": {KEY: others},
    }

    async def create() -> None:
        controller.kick(KEY)
        await settle(controller)

    create_lag, create_cpu = await measured(create)
    before = kube.plans
    burst_lag, burst_cpu = await measured(lambda: burst(controller, pods, events))
    reconciles = kube.plans - before
    await controller.shutdown()
    return {
        "create": {**create_lag, "cpu_s": round(create_cpu, 3)},
        "burst": {**burst_lag, "reconciles": reconciles, "cpu_per_reconcile_s": round(burst_cpu / reconciles, 4)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=999)
    parser.add_argument("--workers", type=int, default=999)
    parser.add_argument("--events", type=int, default=2000, help="pod events in the burst")
    args = parser.parse_args(argv)
    modes = {"as_is": Controller, "baseline_on_loop_uncached": OnTheLoop}
    operator_main.settle_heap()
    results = {name: asyncio.run(run_mode(cls, args.ps, args.workers, args.events)) for name, cls in modes.items()}
    new, old = results["as_is"], results["baseline_on_loop_uncached"]
    ratios = {
        f"{phase}_{figure}": round(old[phase][figure] / new[phase][figure], 2) if new[phase][figure] else None
        for phase, figure in (
            ("create", "max_lag_s"),
            ("burst", "max_lag_s"),
            ("burst", "p99_lag_s"),
            ("burst", "cpu_per_reconcile_s"),
        )
    }
    line = {"benchmark": "operator_loop", "ps": args.ps, "workers": args.workers, "events": args.events}
    print(json.dumps({**line, "goal_max_lag_s": 0.1, "ratios": ratios, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
