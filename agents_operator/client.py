"""A Python client for AgentsJobs: submit, inspect, wait for, read the logs and progress of training jobs.

    from agents_operator.client import AgentsJobClient

    jobs = AgentsJobClient(namespace="research")
    jobs.create("examples/pendulum.yaml")
    jobs.wait("pendulum", timeout=3600)        # raises JobFailed with the condition's reason and message
    print(jobs.progress("pendulum"))
    print(jobs.logs("pendulum", replica="worker-0"))

Manifests are validated with `api.parse_job` before they are sent, so a bad one fails here with every problem
named (the API server would report only the first). Objects come back as plain dicts, as the API server
stores them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

import kubernetes.client
from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines

from agents_operator import api, contract, manifests, naming


class JobNotFound(LookupError):
    """The AgentsJob does not exist (or was deleted while waiting for it)."""


class JobFailed(RuntimeError):
    """The job has a Failed condition; `reason` and `message` are the condition's."""

    def __init__(self, name: str, reason: str | None, message: str | None):
        self.name, self.reason, self.message = name, reason, message
        super().__init__(f"AgentsJob {name} failed: {reason or 'no reason given'}: {message or ''}".rstrip(": "))


class WaitTimeout(TimeoutError):
    """The condition did not become True in time."""


def _parse_replica(replica: str) -> tuple[str, int, str | None]:
    """(type, index, container or None) of 'worker-0', 'envserver-1' or 'worker-0/env-server'."""
    child, _, container = replica.partition("/")
    replica_type, _, index = child.rpartition("-")
    if replica_type not in naming.CHILD_TYPES or not index.isdigit() or (container == "" and "/" in replica):
        raise ValueError(
            "replica must look like worker-0, ps-0, evaluator-0 or envserver-0, optionally with /CONTAINER "
            f"(worker-0/env-server), got {replica!r}"
        )
    return replica_type, int(index), container or None


class AgentsJobClient:
    """AgentsJobs of one namespace, through the Kubernetes API.

    `api_client`: a `kubernetes.client.ApiClient`; by default the in-cluster service account, else the
    current kubeconfig context.
    """

    def __init__(self, namespace: str = "default", api_client: kubernetes.client.ApiClient | None = None):
        if api_client is None:
            from agents_operator.kube import Kube

            api_client = Kube.connect().api
        self.namespace = namespace
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.poll_seconds = 2.0
        """How often `wait` reads the job."""

    # --- objects ---------------------------------------------------------------------------------------------

    def _manifest(self, job: dict | str | Path | api.AgentsJob) -> dict:
        if isinstance(job, api.AgentsJob):
            return job.model_dump(by_alias=True, exclude_unset=True, exclude={"status"}, mode="json")
        if isinstance(job, str | Path):
            docs = manifests.load_documents(job)
            if len(docs) != 1:
                raise manifests.ManifestError(f"{job}: expected one AgentsJob, found {len(docs)} documents")
            return docs[0]
        if isinstance(job, dict):
            return job
        raise TypeError(f"expected a dict, a file path or an AgentsJob, got {type(job).__name__}")

    def create(self, job: dict | str | Path | api.AgentsJob) -> dict:
        """Submit a job given as a manifest dict, a YAML file or an `api.AgentsJob`; returns the stored object.

        Raises `api.InvalidJob` (a ValueError naming every problem) before anything is sent, and ValueError
        when the manifest names another namespace than the client's.
        """
        manifest = self._manifest(job)
        parsed = api.parse_job(manifest)
        if parsed.metadata.namespace not in (None, self.namespace):
            raise ValueError(
                f"AgentsJob {parsed.name} names namespace {parsed.metadata.namespace}, this client serves "
                f"{self.namespace}"
            )
        body = api.json_numbers({**manifest, "metadata": {**manifest["metadata"], "namespace": self.namespace}})
        return self.custom.create_namespaced_custom_object(
            naming.GROUP, naming.VERSION, self.namespace, naming.PLURAL, body
        )

    def get(self, name: str) -> dict:
        """The job as stored (spec and status); raises JobNotFound."""
        try:
            return self.custom.get_namespaced_custom_object(
                naming.GROUP, naming.VERSION, self.namespace, naming.PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                raise JobNotFound(f"AgentsJob {self.namespace}/{name} not found") from None
            raise

    def list(self, label_selector: str | None = None) -> list[dict]:
        """Jobs of the namespace, optionally filtered by a label selector such as 'team=rl'."""
        kwargs = {"label_selector": label_selector} if label_selector else {}
        found = self.custom.list_namespaced_custom_object(
            naming.GROUP, naming.VERSION, self.namespace, naming.PLURAL, **kwargs
        )
        return list(found.get("items") or [])

    def delete(self, name: str) -> bool:
        """Delete the job (its pods and Services go with it); False when it did not exist."""
        try:
            self.custom.delete_namespaced_custom_object(
                naming.GROUP, naming.VERSION, self.namespace, naming.PLURAL, name, propagation_policy="Background"
            )
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    # --- waiting ---------------------------------------------------------------------------------------------

    def wait(self, name: str, condition: str = contract.SUCCEEDED, timeout: float = 3600.0) -> dict:
        """Block until the job's `condition` is True; returns the job.

        Raises JobFailed when the job fails first (unless waiting for Failed), JobNotFound when it is
        deleted, WaitTimeout after `timeout` seconds.
        """
        if condition not in contract.CONDITION_TYPES:
            raise ValueError(f"condition must be one of {contract.CONDITION_TYPES}, got {condition!r}")
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(name)
            if contract.condition_true(job.get("status"), condition):
                return job
            if condition != contract.FAILED and contract.condition_true(job.get("status"), contract.FAILED):
                failed = contract.find_condition(job.get("status"), contract.FAILED) or {}
                raise JobFailed(name, failed.get("reason"), failed.get("message"))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                state = (job.get("status") or {}).get("state") or "no state yet"
                raise WaitTimeout(f"AgentsJob {name}: {condition} not reached in {timeout:g} s (state: {state})")
            time.sleep(min(self.poll_seconds, remaining))

    # --- what the job produces ------------------------------------------------------------------------------

    def progress(self, name: str) -> api.Progress | None:
        """status.progress (global step, env steps, mean return, steps/s), None before the first read."""
        raw = (self.get(name).get("status") or {}).get("progress")
        return api.Progress.model_validate(raw) if raw else None

    @overload
    def logs(self, name: str, replica: str = ..., follow: Literal[False] = ...) -> str: ...

    @overload
    def logs(self, name: str, replica: str = ..., follow: Literal[True] = ...) -> Iterator[str]: ...

    def logs(self, name: str, replica: str = "worker-0", follow: bool = False) -> str | Iterator[str]:
        """The trainer container's log of one replica ('worker-0', 'ps-0', 'evaluator-0'), or the server's of
        an env-server pod ('envserver-0'), or a named container's ('worker-0/env-server': a sidecar): all of
        it as a string, or with follow=True an iterator of lines that ends when the container does.

        Raises JobNotFound when the pod is gone: cleanPodPolicy deletes the ps and running pods when the job
        ends (finished workers stay under the default, Running), and deleting the job deletes every pod.
        """
        replica_type, index, container = _parse_replica(replica)
        pod_name = naming.child_name(name, replica_type, index)
        try:
            pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        except ApiException as err:
            if err.status == 404:
                raise JobNotFound(
                    f"pod {self.namespace}/{pod_name} not found: the job does not exist, has not created it yet, "
                    "or deleted it when it finished (spec.runPolicy.cleanPodPolicy)"
                ) from None
            raise
        container = container or _main_container(pod, replica_type)
        if not follow:
            return self.core.read_namespaced_pod_log(pod_name, self.namespace, container=container)
        return self._follow(pod_name, container)

    def _follow(self, pod_name: str, container: str) -> Iterator[str]:
        response = self.core.read_namespaced_pod_log(
            pod_name, self.namespace, container=container, follow=True, _preload_content=False
        )
        try:
            yield from iter_resp_lines(response)
        finally:
            response.release_conn()


def _main_container(pod: Any, replica_type: str) -> str:
    """The container `render` runs the pod's program in: the trainer, or in an env-server pod the server."""
    names = [c.name for c in pod.spec.containers]
    return names[naming.main_index(names, replica_type)]
