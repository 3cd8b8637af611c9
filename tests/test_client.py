"""AgentsJobClient against mocked Kubernetes API classes: no cluster."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from kubernetes.client import ApiException

from agents_operator import api, client, contract

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pendulum.yaml"
ARGS = ("agents.dev", "v1alpha1", "research", "agentsjobs")


@pytest.fixture
def jobs():
    with (
        mock.patch("kubernetes.client.CustomObjectsApi") as custom,
        mock.patch("kubernetes.client.CoreV1Api") as core,
    ):
        made = client.AgentsJobClient(namespace="research", api_client=object())
        assert made.custom is custom.return_value and made.core is core.return_value
        yield made


def _manifest() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _job(*conditions: tuple[str, str, str, str], progress: dict | None = None) -> dict:
    status = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}
    if progress:
        status["progress"] = progress
    return {**_manifest(), "status": status}


# --- create ------------------------------------------------------------------------------------------------


def test_create_from_a_dict_sets_the_namespace(jobs):
    jobs.custom.create_namespaced_custom_object.return_value = {"stored": True}
    assert jobs.create(_manifest()) == {"stored": True}
    (call,) = jobs.custom.create_namespaced_custom_object.call_args_list
    *args, body = call.args
    assert tuple(args) == ARGS
    assert body["metadata"] == {"name": "pendulum", "namespace": "research"}
    assert body["spec"] == _manifest()["spec"]


def test_create_sends_integral_floats_as_integers_as_kubectl_does(jobs):
    manifest = _manifest()
    manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 2.0  # a JSON 2.0 the scale subresource refuses
    jobs.create(manifest)
    body = jobs.custom.create_namespaced_custom_object.call_args.args[-1]
    replicas = body["spec"]["replicaSpecs"]["worker"]["replicas"]
    assert replicas == 2 and type(replicas) is int


def test_create_from_a_file_and_from_a_model_send_the_same_manifest(jobs):
    jobs.create(EXAMPLE)
    jobs.create(str(EXAMPLE))
    jobs.create(api.parse_job(_manifest()))
    bodies = [c.args[-1] for c in jobs.custom.create_namespaced_custom_object.call_args_list]
    assert bodies[0] == bodies[1] == bodies[2]


def test_a_model_keeps_an_explicit_null_override(jobs):
    manifest = _manifest()
    manifest["spec"]["trainer"]["maxGradNorm"] = None
    jobs.create(api.parse_job(manifest))
    assert jobs.custom.create_namespaced_custom_object.call_args.args[-1]["spec"]["trainer"]["maxGradNorm"] is None


def test_an_invalid_job_is_refused_before_anything_is_sent(jobs):
    manifest = _manifest()
    manifest["spec"]["replicaSpecs"]["worker"]["replicas"] = 0
    manifest["spec"]["trainer"]["preset"] = "nope"
    with pytest.raises(api.InvalidJob) as err:
        jobs.create(manifest)
    fields = {p.field for p in err.value.problems}
    assert "spec.replicaSpecs.worker.replicas" in fields
    jobs.custom.create_namespaced_custom_object.assert_not_called()


def test_another_namespace_is_refused(jobs):
    manifest = _manifest()
    manifest["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(ValueError, match="names namespace elsewhere"):
        jobs.create(manifest)


def test_a_file_with_several_documents_is_refused(jobs, tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(EXAMPLE.read_text() + "\n---\n" + EXAMPLE.read_text())
    with pytest.raises(ValueError, match="expected one AgentsJob, found 2"):
        jobs.create(path)


def test_create_rejects_other_types(jobs):
    with pytest.raises(TypeError):
        jobs.create(42)


# --- get, list, delete -------------------------------------------------------------------------------------


def test_get_list_delete(jobs):
    jobs.custom.get_namespaced_custom_object.return_value = {"metadata": {"name": "pendulum"}}
    jobs.custom.list_namespaced_custom_object.return_value = {"items": [{"a": 1}, {"b": 2}]}
    assert jobs.get("pendulum") == {"metadata": {"name": "pendulum"}}
    assert jobs.list(label_selector="team=rl") == [{"a": 1}, {"b": 2}]
    assert jobs.custom.list_namespaced_custom_object.call_args.kwargs == {"label_selector": "team=rl"}
    assert jobs.delete("pendulum") is True
    assert jobs.custom.delete_namespaced_custom_object.call_args.args == (*ARGS, "pendulum")


def test_missing_jobs(jobs):
    jobs.custom.get_namespaced_custom_object.side_effect = ApiException(status=404)
    jobs.custom.delete_namespaced_custom_object.side_effect = ApiException(status=404)
    with pytest.raises(client.JobNotFound, match="research/gone"):
        jobs.get("gone")
    assert jobs.delete("gone") is False


def test_other_api_errors_pass_through(jobs):
    jobs.custom.get_namespaced_custom_object.side_effect = ApiException(status=403)
    with pytest.raises(ApiException):
        jobs.get("pendulum")


# --- wait --------------------------------------------------------------------------------------------------


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(client, "time", fake)
    return fake


def test_wait_returns_once_succeeded(jobs, clock):
    running = _job(("Running", "True", "JobRunning", ""))
    done = _job(("Running", "False", "ChiefSucceeded", ""), ("Succeeded", "True", "ChiefSucceeded", "ok"))
    jobs.custom.get_namespaced_custom_object.side_effect = [running, running, done]
    assert jobs.wait("pendulum", timeout=60) is done
    assert clock.now == 4.0


def test_wait_raises_on_failure_with_the_conditions_reason(jobs, clock):
    failed = _job(("Failed", "True", "BackoffLimitExceeded", "pod pendulum-worker-1 failed (exit code 137)"))
    jobs.custom.get_namespaced_custom_object.return_value = failed
    with pytest.raises(client.JobFailed, match="BackoffLimitExceeded: pod pendulum-worker-1") as err:
        jobs.wait("pendulum")
    assert err.value.reason == "BackoffLimitExceeded"
    assert jobs.wait("pendulum", condition="Failed") is failed


def test_wait_times_out(jobs, clock):
    jobs.custom.get_namespaced_custom_object.return_value = {**_job(), "status": {"state": "Running"}}
    with pytest.raises(client.WaitTimeout, match="not reached in 5 s \\(state: Running\\)"):
        jobs.wait("pendulum", timeout=5)
    assert clock.now == 5.0


def test_wait_for_a_deleted_job(jobs, clock):
    jobs.custom.get_namespaced_custom_object.side_effect = [_job(), ApiException(status=404)]
    with pytest.raises(client.JobNotFound):
        jobs.wait("pendulum")


def test_wait_checks_the_condition_name(jobs):
    with pytest.raises(ValueError, match="condition must be one of"):
        jobs.wait("pendulum", condition="Done")


# --- progress and logs -------------------------------------------------------------------------------------


def test_progress(jobs):
    progress = {"globalStep": 1200, "envSteps": 96000, "meanReturn": -180.5, "updatedAt": "2025-01-01T00:00:00Z"}
    jobs.custom.get_namespaced_custom_object.side_effect = [_job(progress=progress), _job()]
    got = jobs.progress("pendulum")
    assert got == api.Progress(global_step=1200, env_steps=96000, mean_return=-180.5, updated_at=progress["updatedAt"])
    assert jobs.progress("pendulum") is None


def _pod(*names: str) -> SimpleNamespace:
    return SimpleNamespace(spec=SimpleNamespace(containers=[SimpleNamespace(name=n) for n in names]))


def test_logs_of_the_trainer_container(jobs):
    jobs.core.read_namespaced_pod.return_value = _pod("sidecar", "agents")
    jobs.core.read_namespaced_pod_log.return_value = "step 1\nstep 2\n"
    assert jobs.logs("pendulum", replica="ps-0") == "step 1\nstep 2\n"
    assert jobs.core.read_namespaced_pod.call_args.args == ("pendulum-ps-0", "research")
    assert jobs.core.read_namespaced_pod_log.call_args.kwargs == {"container": "agents"}
    jobs.core.read_namespaced_pod.return_value = _pod("trainer", "sidecar")
    jobs.logs("pendulum")
    assert jobs.core.read_namespaced_pod_log.call_args.args == ("pendulum-worker-0", "research")
    assert jobs.core.read_namespaced_pod_log.call_args.kwargs == {"container": "trainer"}


def test_logs_of_env_servers_and_sidecars(jobs):
    jobs.core.read_namespaced_pod.return_value = _pod("env-server")
    jobs.core.read_namespaced_pod_log.return_value = "serving\n"
    assert jobs.logs("cheetah", replica="envserver-3") == "serving\n"
    assert jobs.core.read_namespaced_pod_log.call_args.args == ("cheetah-envserver-3", "research")
    assert jobs.core.read_namespaced_pod_log.call_args.kwargs == {"container": "env-server"}
    jobs.core.read_namespaced_pod.return_value = _pod("agents")  # init containers are not in spec.containers
    jobs.logs("cheetah", replica="worker-1/env-server")
    assert jobs.core.read_namespaced_pod_log.call_args.args == ("cheetah-worker-1", "research")
    assert jobs.core.read_namespaced_pod_log.call_args.kwargs == {"container": "env-server"}


def test_follow_streams_lines_and_releases_the_connection(jobs):
    response = mock.Mock()
    response.stream.return_value = iter([b"step 1\nst", b"ep 2\n"])
    jobs.core.read_namespaced_pod.return_value = _pod("agents")
    jobs.core.read_namespaced_pod_log.return_value = response
    assert list(jobs.logs("pendulum", follow=True)) == ["step 1", "step 2"]
    assert jobs.core.read_namespaced_pod_log.call_args.kwargs["follow"] is True
    response.release_conn.assert_called_once()


def test_logs_of_a_pod_that_is_gone(jobs):
    jobs.core.read_namespaced_pod.side_effect = ApiException(status=404)
    with pytest.raises(client.JobNotFound, match="cleanPodPolicy"):
        jobs.logs("pendulum", replica="ps-0")


@pytest.mark.parametrize("replica", ["worker", "chief-0", "worker-x", "", "worker-0/", "/env-server"])
def test_bad_replica_names(jobs, replica):
    with pytest.raises(ValueError, match="replica must look like"):
        jobs.logs("pendulum", replica=replica)


def test_job_failed_message_without_details():
    assert str(client.JobFailed("j", None, None)) == "AgentsJob j failed: no reason given"
    assert contract.find_condition({}, "Failed") is None and contract.find_condition(None, "Failed") is None
