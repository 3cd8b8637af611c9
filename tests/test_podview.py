"""Pod views (podview.py): what a pod's status, and its Events, say to reconcile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents_operator import podview
from tests.world import NOW, make_pod


@pytest.mark.parametrize(
    ("pod", "state", "exit_code"),
    [
        (make_pod("j", "worker", 0, "Pending"), podview.POD_ACTIVE, None),
        (make_pod("j", "worker", 0, "Unknown"), podview.POD_ACTIVE, None),
        (make_pod("j", "worker", 0, "Succeeded", exit_code=0), podview.POD_SUCCEEDED, None),
        (make_pod("j", "worker", 0, "Failed", exit_code=3), podview.POD_FAILED, 3),
        (make_pod("j", "worker", 0, "Failed", reason="Evicted"), podview.POD_FAILED, None),
        (make_pod("j", "worker", 0, "Failed", exit_code=137, deleting=True), podview.POD_TERMINATING, 137),
    ],
)
def test_view_pod_state(pod, state, exit_code):
    view = podview.view_pod(pod)
    assert view.state == state
    assert view.exit_code == exit_code


def test_view_pod_prefers_the_trainer_container_and_failed_sidecars():
    pod = make_pod("j", "ps", 0, "Failed")
    pod["status"]["containerStatuses"] = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 2}}},
        {"name": "agents", "state": {"terminated": {"exitCode": 139, "reason": "Error"}}},
    ]
    assert podview.view_pod(pod).exit_code == 139
    pod["status"]["containerStatuses"][1]["state"]["terminated"]["exitCode"] = 0
    assert podview.view_pod(pod).exit_code == 2


@pytest.mark.parametrize(
    "labels",
    [{}, {"agents.dev/job-name": "j"}, {"agents.dev/job-name": "j", "agents.dev/replica-type": "chief"}],
)
def test_view_pod_ignores_pods_that_are_not_replicas(labels):
    assert podview.view_pod({"metadata": {"name": "j-worker-0", "labels": labels}}) is None


def test_view_pod_filters_by_job():
    assert podview.view_pod(make_pod("j", "worker", 0), job="other") is None


def test_overlay_applies_our_own_recent_writes():
    failed = podview.view_pod(make_pod("j", "worker", 1, "Failed", exit_code=1))
    running = podview.view_pod(make_pod("j", "worker", 0))
    out = podview.overlay([failed, running], deleting={"j-worker-0"}, counted={"j-worker-1": 4})
    assert out[0].counted == 4 and out[1].terminating


# What the real node's kubelet and scheduler reported for pods that could not start (tests/node).
NEVER_PULL = 'Container image "agents-operator-trainer:nope" is not present with pull policy of Never'
UNSCHEDULABLE_MESSAGE = "0/1 nodes are available: 1 Insufficient cpu."


def _waiting(reason: str, message: str, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    return {key: [{"name": "agents", "state": {"waiting": {"reason": reason, "message": message}}}]}


@pytest.mark.parametrize(
    ("extra", "waiting", "message", "state"),
    [
        (_waiting("ErrImageNeverPull", NEVER_PULL), "ErrImageNeverPull", f"container agents: {NEVER_PULL}", "failed"),
        (_waiting("ImagePullBackOff", "Back-off"), "ImagePullBackOff", "container agents: Back-off", "active"),
        (
            _waiting("CreateContainerConfigError", 'secret "s" not found', init=True),
            "CreateContainerConfigError",
            'container agents: secret "s" not found',
            "active",
        ),
        (
            {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": UNSCHEDULABLE_MESSAGE,
                    }
                ]
            },
            "Unschedulable",
            UNSCHEDULABLE_MESSAGE,
            "active",
        ),
        (_waiting("ContainerCreating", ""), None, None, "active"),
        ({"conditions": [{"type": "PodScheduled", "status": "True"}]}, None, None, "active"),
    ],
)
def test_view_pod_says_why_a_pod_cannot_start(extra, waiting, message, state):
    pod = make_pod("j", "worker", 0, "Pending")
    pod["status"].update(extra)
    view = podview.view_pod(pod)
    assert (view.waiting, view.waiting_message, view.state) == (waiting, message, state)


def test_a_finished_pod_is_not_waiting():
    pod = make_pod("j", "worker", 0, "Failed", exit_code=1)
    pod["status"].update(_waiting("CrashLoopBackOff", "back-off"))
    assert podview.view_pod(pod).waiting is None


def test_a_failed_container_says_its_last_line():
    """The kubelet's termination message under FallbackToLogsOnError is the end of the log."""
    pod = make_pod("j", "worker", 0, "Failed", exit_code=2)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated["message"] = "Traceback (most recent call last):\n  ...\nerror: env_id 'X': no such environment\n\n"
    assert podview.view_pod(pod).message == "error: env_id 'X': no such environment"
    terminated["message"] = "x" * 5000
    assert len(podview.view_pod(pod).message) == podview.MESSAGE_CHARS


# Events as the real node posted them for a pod whose ConfigMap volume does not exist (tests/node): the
# scheduler's Normal, a transient FailedMount of the token volume, and the kubelet's repeated FailedMount.
POD_UID = "df8fe556-dacd-4c79-a7f7-7272003bed23"
MISSING = 'MountVolume.SetUp failed for volume "v" : configmap "nope" not found'


def _event(kind: str, reason: str, message: str, at: str, *, uid: str = POD_UID, kubelet: bool = True) -> dict:
    return {
        "involvedObject": {"kind": "Pod", "name": "j-worker-0", "uid": uid},
        "type": kind,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "source": {"component": "kubelet", "host": "kube-node"} if kubelet else {},
        "reportingComponent": "kubelet" if kubelet else "default-scheduler",
    }


def _pending(created: str = "2030-01-01T11:59:30Z") -> podview.PodView:
    pod = make_pod("j", "worker", 0, "Pending")
    pod["metadata"].update(uid=POD_UID, creationTimestamp=created)
    return podview.view_pod(pod)


NODE_EVENTS = [
    _event(
        "Normal", "Scheduled", "Successfully assigned ns/j-worker-0 to kube-node", "2030-01-01T11:59:30Z", kubelet=False
    ),
    _event("Warning", "FailedMount", 'MountVolume.SetUp failed for volume "token" : not found', "2030-01-01T11:59:30Z"),
    _event("Warning", "FailedMount", MISSING, "2030-01-01T11:59:46Z"),
]


def test_a_pod_waits_unexplained_only_while_pending_with_nothing_said_for_a_while():
    assert podview.unexplained(_pending(), NOW)  # 30 s
    assert not podview.unexplained(_pending("2030-01-01T11:59:55Z"), NOW)  # 5 s: it may just be starting
    assert not podview.unexplained(replace(_pending(), waiting="ImagePullBackOff"), NOW)
    assert not podview.unexplained(replace(_pending(), phase="Running"), NOW)
    assert not podview.unexplained(replace(_pending(), terminating=True), NOW)


def test_a_warning_event_explains_a_pod_that_waits():
    view = podview.explained(_pending(), NODE_EVENTS, NOW)
    assert (view.waiting, view.waiting_message, view.state) == ("FailedMount", MISSING, "active")


@pytest.mark.parametrize(
    "events",
    [
        [],
        # the start went on past the warning: the kubelet pulled and created the container after it
        [*NODE_EVENTS, _event("Normal", "Pulled", "Container image already present", "2030-01-01T11:59:47Z")],
        # an earlier pod of the slot (another uid), a warning of the kind that says nothing about starting
        [_event("Warning", "FailedMount", MISSING, "2030-01-01T11:59:46Z", uid="other")],
        [_event("Warning", "Unhealthy", "Readiness probe failed", "2030-01-01T11:59:46Z")],
        # said more than WARNING_WINDOW s ago
        [_event("Warning", "FailedMount", MISSING, "2030-01-01T11:56:00Z")],
    ],
)
def test_events_that_do_not_explain_a_wait(events):
    assert podview.explained(_pending(), events, NOW) == _pending()


def test_the_latest_time_of_an_event_is_its_series_or_its_event_time():
    series = _event("Warning", "FailedCreatePodSandBox", "failed to set up the network", "2030-01-01T11:50:00Z")
    series["series"] = {"lastObservedTime": "2030-01-01T11:59:50.123456Z", "count": 4}
    assert podview.explained(_pending(), [series], NOW).waiting == "FailedCreatePodSandBox"
    micro = {**_event("Warning", "FailedMount", MISSING, ""), "lastTimestamp": None}
    micro["eventTime"] = "2030-01-01T11:59:58.000001Z"
    assert podview.explained(_pending(), [micro], NOW).waiting_message == MISSING
