"""Every way a replica fails on the real node ends in a status that says so, and the restart policy decides.

The exit codes, reasons and messages here are the kubelet's and the scheduler's: a container killed from the
node with SIGKILL, a sync worker frozen while a backup worker stands in, a trainer that exits with an error, an
image the node does not hold, requests no node fits, a memory limit the trainer outgrows, a Secret or a
ConfigMap that does not exist.
"""

from __future__ import annotations

import re
import time

from tests.distributed.test_backup_workers import env_steps
from tests.node.node import Namespace, until

SAID_WITHIN = 60
"""Seconds within which the job's status says what the kubelet reported (the issue's bar: a minute)."""
LOST_SECONDS = 30
"""How long a sync worker is frozen: three of the chief's progress lines (every 10 s), and many iterations."""
BACKUP_STEPS = 2_500_000
"""The backup-worker job's budget. The node's sync Pendulum workers make 14k-18k env steps/s: 300k steps ended
inside the freeze, and 1M a second after it, before worker 2's late change reached a step that drops it; the
freeze has to sit well inside the run."""


def job(name: str, *, steps: int = 16384, restart: str = "ExitCode", backoff: int = 3, **container) -> dict:
    """A short pendulum job (1 ps + 2 sync workers) whose workers' container has `container` merged in."""
    worker: dict = {"replicas": 2, "restartPolicy": restart}
    if container:
        worker["template"] = {"spec": {"containers": [{"name": "agents", **container}]}}
    return {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": name},
        "spec": {
            "trainer": {"preset": "pendulum", "totalSteps": steps, "videoEpisodes": 0, "evalEpisodes": 2},
            "replicaSpecs": {"ps": {"replicas": 1, "restartPolicy": "Always"}, "worker": worker},
            "runPolicy": {"backoffLimit": backoff},
        },
    }


def _said(ns: Namespace, name: str, condition: str, reason: str) -> dict:
    """The condition with `reason` once the job shows it (within SAID_WITHIN s), and the Event of that reason."""
    found = until(
        lambda: (c := ns.condition(name, condition)).get("reason") == reason and c.get("status") == "True" and c,
        SAID_WITHIN,
        f"{condition} {reason} on {name}:\n{ns.describe(name)}",
    )
    until(lambda: any(e.get("reason") == reason for e in ns.events(name)), SAID_WITHIN, f"an Event {reason}")
    return found


def test_a_replica_killed_with_sigkill_is_restarted_under_exit_code(namespace):
    ns = namespace
    ns.apply(job("killed", steps=600_000))
    ns.wait_running("killed", 3)
    until(lambda: (ns.status("killed").get("progress") or {}).get("globalStep"), 240, "training progress")
    ns.signal("killed-worker-1", "agents", "SIGKILL")
    until(lambda: ns.status("killed").get("restarts") == 1, SAID_WITHIN, f"a restart:\n{ns.describe('killed')}")
    (event,) = [e for e in ns.events("killed") if e.get("reason") == "PodFailed"]
    assert "exit code 137" in event["message"], event
    status = ns.wait_state("killed", "Succeeded", 600)
    assert status["restarts"] == 1


def test_a_sync_worker_lost_for_longer_than_an_iteration_does_not_stall_a_job_with_a_backup_worker(namespace):
    """1 ps + 3 sync workers, `backupWorkers: 1`: worker 2's trainer is frozen from the node (SIGSTOP) for
    LOST_SECONDS, many iterations; the chief's progress lines keep counting env steps meanwhile; thawed, its
    late change is dropped and logged, and the job succeeds without a restart."""
    ns = namespace
    manifest = job("backup", steps=BACKUP_STEPS)
    manifest["spec"]["trainer"].update(mode="sync", backupWorkers=1)
    manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 3
    ns.apply(manifest)
    ns.wait_running("backup", 4)
    chief = lambda: ns.kubectl("logs", "backup-worker-0", "-c", "agents")  # noqa: E731
    until(lambda: " steps  return" in ns.kubectl("logs", "backup-worker-2", "-c", "agents"), 300, "worker 2 trains")
    ns.signal("backup-worker-2", "agents", "SIGSTOP")
    before = len(env_steps(chief()))
    time.sleep(LOST_SECONDS)
    during = env_steps(chief())[max(before - 1, 0) :]
    ns.signal("backup-worker-2", "agents", "SIGCONT")
    assert len(during) >= 3 and during[-1] > during[0], during  # the others kept stepping
    status = ns.wait_state("backup", "Succeeded", 600)
    assert status["restarts"] == 0, status
    assert re.search(r"sync: step \d+ applied; dropped the late change of worker 2", chief()), chief()[-3000:]


def test_a_replica_that_exits_with_an_error_fails_the_job_with_its_last_line(namespace):
    ns = namespace
    manifest = job("crashes")
    manifest["spec"]["trainer"]["envId"] = "NoSuchEnv-v0"
    ns.apply(manifest)
    status = ns.wait_state("crashes", "Failed", 300)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PermanentExitCode", failed
    assert "(exit code 2, Error: agents-operator train: error: env_id 'NoSuchEnv-v0'" in failed["message"], failed
    assert status["restarts"] == 0


def test_an_image_the_node_does_not_hold_is_said_and_fails_the_job_after_its_backoff(namespace):
    ns = namespace
    ns.apply(job("noimage", backoff=1, image="agents-operator-trainer:not-loaded", imagePullPolicy="Never"))
    status = ns.wait_state("noimage", "Failed", SAID_WITHIN)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert "ErrImageNeverPull" in failed["message"] and "agents-operator-trainer:not-loaded" in failed["message"]
    assert any("ErrImageNeverPull" in e.get("message", "") for e in ns.events("noimage") if e["reason"] == "PodFailed")


def test_requests_no_node_fits_are_said_while_the_job_waits(namespace):
    ns = namespace
    ns.apply(job("toobig", resources={"requests": {"cpu": "64"}}))
    condition = _said(ns, "toobig", "ReplicaFailure", "Unschedulable")
    assert "Insufficient cpu" in condition["message"], condition
    assert ns.state("toobig") == "ReplicaFailure"


def test_a_missing_secret_is_said_while_the_job_waits(namespace):
    ns = namespace
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "no-such-secret", "key": "token"}}}]
    ns.apply(job("nosecret", env=env))
    condition = _said(ns, "nosecret", "ReplicaFailure", "CreateContainerConfigError")
    assert 'secret "no-such-secret" not found' in condition["message"], condition


def test_a_volume_the_kubelet_cannot_mount_is_said_while_the_job_waits(namespace):
    """The pod's status says only ContainerCreating; the kubelet's reason is in its FailedMount Events."""
    ns = namespace
    manifest = job("nomount", volumeMounts=[{"name": "settings", "mountPath": "/settings"}])
    volume = {"name": "settings", "configMap": {"name": "no-such-config"}}
    manifest["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["volumes"] = [volume]
    ns.apply(manifest)
    condition = _said(ns, "nomount", "ReplicaFailure", "FailedMount")
    assert 'configmap "no-such-config" not found' in condition["message"], condition
    assert ns.state("nomount") == "ReplicaFailure"


def test_a_replica_killed_for_memory_is_retried_then_fails_the_job_with_oomkilled(namespace):
    ns = namespace
    ns.apply(job("oom", backoff=1, resources={"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi"}}))
    status = ns.wait_state("oom", "Failed", 300)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert "exit code 137, OOMKilled" in failed["message"], failed
