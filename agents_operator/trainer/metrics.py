"""Prometheus metrics of a training process, served at http://<host>:<metrics_port>/metrics.

Their names are `contract`'s. The operator reads them to report progress in the AgentsJob status. A port
that cannot be bound is logged and training goes on without the endpoint: metrics must never stop a run. The server
(`metrics_server`) listens on every interface in a pod and on `host` where one is given (the local
launcher gives 127.0.0.1).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Gauge

from agents_operator import contract
from agents_operator.metrics_server import MetricsServer

log = logging.getLogger(__name__)


class Metrics:
    """The trainer's gauges in their own registry, optionally served over HTTP."""

    def __init__(self, port: int, host: str = ""):
        self.registry = CollectorRegistry()
        self.global_step = self._gauge(
            contract.METRIC_GLOBAL_STEP, "Updates applied to the shared parameters (one per push)."
        )
        self.env_steps = self._gauge(contract.METRIC_ENV_STEPS, "Environment steps taken by all workers so far.")
        self.iterations = self._gauge(contract.METRIC_ITERATIONS, "PPO iterations (rollout + update) of all workers.")
        self.mean_return = self._gauge(
            contract.METRIC_MEAN_RETURN, "Mean return of the last iteration's training episodes."
        )
        self.eval_return = self._gauge(contract.METRIC_EVAL_RETURN, "Mean return of the last evaluation.")
        self.steps_per_second = self._gauge(
            contract.METRIC_STEPS_PER_SECOND, "Environment steps per second of the whole job, over the last iteration."
        )
        # Not a number until measured: readers (operator, launcher) leave NaN samples out. The counters too,
        # until the chief knows the run's (a resumed run's are not 0, and a 0 would count its restored steps as
        # made in this run).
        for gauge in (
            self.global_step,
            self.env_steps,
            self.iterations,
            self.mean_return,
            self.eval_return,
            self.steps_per_second,
        ):
            gauge.set(float("nan"))
        self._server: MetricsServer | None = None
        if port:
            try:
                self._server = MetricsServer(self.registry, host, port)
            except OSError as error:
                log.warning("metrics endpoint not started: port %d: %s", port, error)

    def _gauge(self, name: str, text: str) -> Gauge:
        return Gauge(name, text, registry=self.registry)

    def counters(self, global_step: int, env_steps: int, iterations: int) -> None:
        self.global_step.set(global_step)
        self.env_steps.set(env_steps)
        self.iterations.set(iterations)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
