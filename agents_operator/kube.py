"""The only module that talks to the Kubernetes API: creates, deletes, patches and Events, and executing a plan.

It uses the official `kubernetes` client (blocking; `controller` calls it through `asyncio.to_thread`) with
plain dicts on the wire: no generated model classes, so a pod template keeps every field the user wrote, and
the same code serves Pods, Services, Deployments, Events and AgentsJobs. kopf's own watching logs in with the
very same configuration (`connection_info`), so a `--kubeconfig`/`--context` applies to both.

Idempotence is by status code: 409 on create means the child exists (deterministic names), 404 on delete
means it is gone already. Nothing here relies on garbage collection or label selectors.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kubernetes.client
import kubernetes.config
import yaml

from agents_operator import jobstatus, naming, podview, reconcile

log = logging.getLogger(__name__)

COMPONENT = "agents-operator"
RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "Service": ("", "v1", "services"),
    "Deployment": ("apps", "v1", "deployments"),
    "NetworkPolicy": ("networking.k8s.io", "v1", "networkpolicies"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Event": ("", "v1", "events"),
    naming.KIND: (naming.GROUP, naming.VERSION, naming.PLURAL),
}
MERGE_PATCH = "application/merge-patch+json"
POOL_THREADS = 16
"""Threads on which one client runs the independent actions of plans (the operator's API concurrency)."""
CALLER_THREADS = 32
"""Threads that may call one client at once besides its own: the operator's default executor (`to_thread`)."""


def path(kind: str, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    group, version, plural = RESOURCES[kind]
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    out = f"{base}/namespaces/{namespace}/{plural}"
    if name:
        out += f"/{name}"
    if subresource:
        out += f"/{subresource}"
    return out


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status_code: int, body: str):
        self.status = status_code
        self.body = body
        try:
            message = json.loads(body).get("message") or body
        except (ValueError, AttributeError):
            message = body
        self.message = str(message)[:500]
        super().__init__(f"HTTP {status_code}: {self.message}")


REFUSED = (400, 403, 422)
"""What the API server answers when it will not take an object as it is (admission: quota, policy, a namespace
being deleted; validation): the same create will not succeed until something else changes."""


@dataclass
class Executed:
    """What executing a plan did."""

    created: Counter = field(default_factory=Counter)
    deleted: Counter = field(default_factory=Counter)
    status_written: bool = False
    job_deleted: bool = False
    job_gone: bool = False
    """The job disappeared while we worked (404 on its status): nothing more to do."""
    done: list = field(default_factory=list)
    """Actions carried out (when `execute` stopped at an error, those before it: `PlanInterrupted.executed`)."""
    refused: list[reconcile.Refusal] = field(default_factory=list)
    """Creates the API server refused (`REFUSED`); the other creates of the plan were still attempted."""


class PlanInterrupted(Exception):
    """Executing a plan stopped at an error: `cause` is the error, `executed` what was done before it (which
    must not be done twice)."""

    def __init__(self, cause: Exception, executed: Executed):
        super().__init__(str(cause))
        self.cause = cause
        self.executed = executed


class NoCluster(Exception):
    """There is no cluster to talk to: not in a pod, and no usable kubeconfig; the message says which."""


IN_CLUSTER_HINT = (
    "not in a pod (no service account) and no kubeconfig (~/.kube/config, $KUBECONFIG or --kubeconfig FILE)"
)


class Kube:
    """A connection to one cluster."""

    def __init__(self, api: kubernetes.client.ApiClient, timeout: float = 30.0, instance: str | None = None):
        self.api = api
        self.timeout = timeout
        self.instance = instance or os.environ.get("POD_NAME") or socket.gethostname()
        self.pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="kube")

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, host: str | None = None, timeout: float = 30.0
    ) -> Kube:
        """In-cluster service account, else the kubeconfig (or a bare `host`, as for kmock in tests)."""
        config = kubernetes.client.Configuration()
        if host:
            config.host = host.rstrip("/")
        else:
            _load_config(config, kubeconfig, context)
        # A connection for every thread that may use one at once: a smaller pool discards connections under
        # load ("Connection pool is full"), and each discarded one is a new TLS handshake later.
        config.connection_pool_maxsize = POOL_THREADS + CALLER_THREADS
        return cls(kubernetes.client.ApiClient(config), timeout=timeout)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def connection_info(self) -> dict[str, Any]:
        """Keyword arguments of `kopf.ConnectionInfo` for the same cluster and credentials."""
        config = self.api.configuration
        if config.refresh_api_key_hook is not None:
            config.refresh_api_key_hook(config)
        header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix("authorization")
        parts = header.split(" ", 1) if header else []
        scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
        return {
            "server": config.host,
            "ca_path": config.ssl_ca_cert,
            "insecure": not config.verify_ssl,
            "username": config.username or None,
            "password": config.password or None,
            "scheme": scheme,
            "token": token,
            "certificate_path": config.cert_file,
            "private_key_path": config.key_file,
        }

    # --- raw requests ----------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict:
        method, url, headers, body, _ = self.api.param_serialize(
            method=method,
            resource_path=url_path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=self.timeout)
        data = response.read()
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
        if not 200 <= response.status < 300:
            raise ApiError(response.status, text)
        try:
            return json.loads(text) if text else {}
        except ValueError:
            return {}

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.request("GET", path(kind, namespace, name))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str, labels: dict[str, str] | None = None) -> list[dict]:
        """Objects of a kind in a namespace; label filtering is repeated here (not every server applies it)."""
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else None
        items = self.request("GET", path(kind, namespace), query=query).get("items") or []
        labels = labels or {}
        return [
            i for i in items if all((i.get("metadata", {}).get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def create(self, obj: dict) -> bool:
        """True when created, False when it existed already."""
        meta = obj["metadata"]
        try:
            self.request("POST", path(obj["kind"], meta["namespace"]), body=obj)
            return True
        except ApiError as err:
            if err.status == 409:
                return False
            raise

    def delete(self, kind: str, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
        """True when deleted (or marked for deletion), False when it was gone already."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            self.request("DELETE", path(kind, namespace, name), body=body)
            return True
        except ApiError as err:
            if err.status == 404:
                return False
            raise

    def annotate(self, kind: str, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        try:
            self.request(
                "PATCH",
                path(kind, namespace, name),
                body={"metadata": {"annotations": annotations}},
                content_type=MERGE_PATCH,
            )
            return True
        except ApiError as err:
            if err.status == 404:
                return False
            raise

    def patch_status(self, namespace: str, name: str, patch: dict) -> dict | None:
        """Merge-patch the job's status subresource; None when the job is gone."""
        try:
            return self.request(
                "PATCH", path(naming.KIND, namespace, name, "status"), body={"status": patch}, content_type=MERGE_PATCH
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def post_event(self, job: dict, type_: str, reason: str, message: str, now: datetime | None = None) -> None:
        """A core/v1 Event about the job. Names are made here (not generateName), so that any server takes them."""
        meta = job.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name") or ""
        stamp = jobstatus.timestamp(now) if now else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        involved = {"apiVersion": naming.API_VERSION, "kind": naming.KIND, "name": name, "namespace": namespace}
        if meta.get("uid"):
            involved["uid"] = meta["uid"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": f"{naming.GROUP}/{COMPONENT}",
            "reportingInstance": self.instance[:128],
        }
        try:
            self.request("POST", path("Event", namespace), body=event)
        except (ApiError, OSError) as err:  # an Event is never worth failing a reconcile for
            log.warning("event %s/%s %s not posted: %s", namespace, name, reason, err)

    def pod_events(self, namespace: str, pods: list[str]) -> dict[str, list[dict]]:
        """The Events about each of `pods` (by name), one GET each. Reading them is never worth failing a
        reconcile for: a pod whose Events cannot be read (no permission, an error) gets none."""

        def read(name: str) -> list[dict]:
            selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
            try:
                return (
                    self.request("GET", path("Event", namespace), query={"fieldSelector": selector}).get("items") or []
                )
            except (ApiError, OSError) as err:
                log.warning("events of pod %s/%s not read: %s", namespace, name, err)
                return []

        return dict(zip(pods, self._parallel(read, pods), strict=True))

    # --- plans -----------------------------------------------------------------------------------------------

    def execute(self, job: dict, plan: reconcile.Plan, now: datetime | None = None) -> Executed:
        """Carry out a plan: markers, then status, then deletes, then creates (Services before Pods), then the
        job's deletion; then its Events. Actions of one kind run in parallel (they are independent). Raises
        PlanInterrupted on anything unexpected (an ApiError, a lost connection): the caller retries with a fresh
        plan, every action being safe to repeat."""
        executed = Executed()
        try:
            self._execute(job, plan, now, executed)
        except Exception as err:
            raise PlanInterrupted(err, executed) from err
        return executed

    def _execute(self, job: dict, plan: reconcile.Plan, now: datetime | None, outcome: Executed) -> None:
        meta = job["metadata"]
        namespace, name = meta.get("namespace") or "default", meta["name"]
        events: list[tuple[str, str, str]] = []

        marks = plan.of(reconcile.MarkCounted)
        self._parallel(
            lambda a: self.annotate("Pod", namespace, a.pod, {podview.ANNOTATION_COUNTED: str(a.restarts)}), marks
        )
        outcome.done += marks
        for action in plan.of(reconcile.WriteStatus):
            if self.patch_status(namespace, name, action.patch) is None:
                outcome.job_gone = True
                return
            outcome.status_written = True
            outcome.done.append(action)

        deletes = plan.of(reconcile.Delete)
        results = self._parallel(lambda a: self.delete(a.kind, namespace, a.name, a.grace_seconds), deletes)
        outcome.done += deletes
        deleted: dict[tuple[str, str], list[str]] = {}
        for action, done in zip(deletes, results, strict=True):
            if done:
                outcome.deleted[action.kind] += 1
                deleted.setdefault((action.kind, action.reason), []).append(action.name)
        for (kind, why), names in deleted.items():
            events.append(("Normal", "SuccessfulDelete", f"Deleted {_listing({kind: names})}: {why}"))
        creates = plan.of(reconcile.Create)
        created: dict[str, list[str]] = {}
        for batch in ([c for c in creates if c.kind != "Pod"], [c for c in creates if c.kind == "Pod"]):
            results = self._parallel(self._create_or_refusal, batch)
            outcome.done += batch
            for action, result in zip(batch, results, strict=True):
                if isinstance(result, reconcile.Refusal):
                    outcome.refused.append(result)
                elif result:
                    outcome.created[action.kind] += 1
                    created.setdefault(action.kind, []).append(action.name)
        if created:
            events.append(("Normal", "SuccessfulCreate", "Created " + _listing(created)))
        for action in plan.of(reconcile.DeleteJob):
            events.append(("Normal", "Deleted", f"Deleting the job: {action.reason}"))
            outcome.job_deleted = self.delete(naming.KIND, namespace, name)
            outcome.done.append(action)
        events += [(e.type, e.reason, e.message) for e in plan.events]
        self._parallel(lambda e: self.post_event(job, e[0], e[1], e[2], now), events)

    def _create_or_refusal(self, action: reconcile.Create) -> bool | reconcile.Refusal:
        """`create`, with a refusal of the object returned rather than raised (other errors are raised)."""
        try:
            return self.create(action.obj)
        except ApiError as err:
            if err.status not in REFUSED:
                raise
            return reconcile.Refusal(action.kind, action.name, err.status, err.message)

    def _parallel(self, fn: Any, items: list) -> list:
        """fn over items on the client's threads, results in order; the first error is raised."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self.pool.map(fn, items))


EVENT_NAMES_LENGTH = 900
"""How much of an Event's message (at most 1024 characters) its lists of children may take."""


def _load_config(config: kubernetes.client.Configuration, kubeconfig: str | None, context: str | None) -> None:
    """Fill `config` from the kubeconfig when one is named, else in-cluster, else ~/.kube/config; NoCluster
    when none of them is usable."""
    try:
        if kubeconfig or context:
            kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=config)
            return
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
        except kubernetes.config.ConfigException:
            # $KUBECONFIG as it is now: the client's own default was read from it when the client was imported.
            default = os.environ.get("KUBECONFIG", "~/.kube/config")
            kubernetes.config.load_kube_config(config_file=default, client_configuration=config)
    except kubernetes.config.ConfigException as error:
        named = f"kubeconfig {kubeconfig or '(default)'}" + (f", context {context}" if context else "")
        raise NoCluster(f"{named}: {error}" if kubeconfig or context else f"no cluster: {IN_CLUSTER_HINT}") from None
    except OSError as error:  # a named kubeconfig that is missing or unreadable
        raise NoCluster(f"kubeconfig {kubeconfig}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise NoCluster(f"kubeconfig {kubeconfig or '(default)'}: not YAML: {str(error).splitlines()[0]}") from None


def _listing(names: dict[str, list[str]]) -> str:
    """'pod p' or 'networkpolicy n, 3 services: a, b, c and 3 pods: a, b, c'; long lists cut short with how many
    more. One Event per reconcile rather than one per child: a job's creation would otherwise post as many
    Events as it has children, doubling the operator's writes."""
    budget = EVENT_NAMES_LENGTH // max(len(names), 1)
    parts = [_some(kind, kind_names, budget) for kind, kind_names in names.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _some(kind: str, names: list[str], budget: int) -> str:
    if len(names) == 1:
        return f"{kind.lower()} {names[0]}"
    shown, length = [], 0
    for name in names:
        if length + len(name) > budget:
            break
        shown.append(name)
        length += len(name) + 2
    more = f" and {len(names) - len(shown)} more" if len(shown) < len(names) else ""
    return f"{len(names)} {RESOURCES[kind][2]} ({', '.join(shown)}{more})"
