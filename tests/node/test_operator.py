"""The chart's operator as the node runs it: two pods of its Deployment with peering. Deleting the serving pod
hands over to the other, and a running job carries on and succeeds; /metrics and the probes answer on the pod."""

from __future__ import annotations

import urllib.request

from tests.node.node import until
from tests.node.test_failures import job

HANDOVER_STEPS = 3_000_000
"""The handover job's budget. 600k steps took the node's two sync Pendulum workers 31 s, and the job had
succeeded before the standby operator pod took over (kopf's peering lets a deleted pod's claim lapse within its
60 s lifetime): no Event came from it."""
EVENTS_AFTER_END = 30
"""Seconds the job's last Events may follow its Succeeded status."""


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200, url
        return response.read().decode()


def _reporters(ns, name: str) -> set[str]:
    """The operator pods that posted the job's Events (an Event's reportingInstance is its pod's name)."""
    return {e.get("reportingInstance") for e in ns.events(name) if e.get("reportingInstance")}


def test_the_operator_pods_answer_their_probes_and_metrics(operator):
    pods = operator.wait_ready()
    values = operator.install.manifest(operator.kube)["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in values["ports"]}
    for pod in pods:
        ip = pod["status"]["podIP"]
        assert _get(f"http://{ip}:{ports['health']}/healthz") is not None
        assert "agents_operator_jobs" in _get(f"http://{ip}:{ports['metrics']}/metrics")


def test_deleting_the_serving_operator_pod_hands_over_and_the_job_succeeds(namespace, operator):
    ns = namespace
    ns.apply(job("handover", steps=HANDOVER_STEPS))
    ns.wait_running("handover", 3)
    (serving,) = until(lambda: _reporters(ns, "handover"), 60, "the job's Events")
    assert serving in {p["metadata"]["name"] for p in operator.pods()}, serving
    operator.kubectl("--namespace", operator.install.namespace, "delete", "pod", serving, "--wait=false")
    status = ns.wait_state("handover", "Succeeded", 600)
    assert status["restarts"] == 0, status
    # The job's end is written before its Events are posted (ChiefSucceeded, the cleanup's): they may come a
    # moment after the status says Succeeded.
    try:
        until(lambda: _reporters(ns, "handover") - {serving}, EVENTS_AFTER_END, "an Event from another operator pod")
    except AssertionError as err:
        raise AssertionError(f"{err}; {serving} was deleted:\n{ns.describe('handover')}") from None
    operator.wait_ready()
