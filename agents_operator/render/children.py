"""The job's other children: a headless Service per addressed replica, the NetworkPolicy of its gRPC ports,
TensorBoard; what its status names of them; and the whole list the operator creates. Pure module."""

from __future__ import annotations

import copy

from agents_operator import exported, naming, tfconfig
from agents_operator.api import AgentsJob, ExportStatus
from agents_operator.render.common import (
    NAMESPACE_NAME_LABEL,
    RUN_VOLUME,
    TENSORBOARD_PORT,
    RenderOptions,
    container_ports,
    metadata,
    replica_labels,
    run_dir,
    run_volume,
    scratch_env,
    secure,
)
from agents_operator.render.pods import cluster_config, pods


def service(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The headless Service that gives replica `<job>-<type>-<index>` its stable DNS name."""
    options = options or RenderOptions()
    name = naming.child_name(job.name, replica_type, index)
    selector = naming.replica_labels(job.name, replica_type, index)
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["containerPort"], "protocol": "TCP"}
        for p in container_ports(job, replica_type, index, options)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, name, replica_labels(job, replica_type, index)),
        "spec": {
            "clusterIP": "None",
            # Resolve before the pod is ready: TF servers connect to each other while starting.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": ports,
        },
    }


ADDRESSED_TYPES = (*tfconfig.CLUSTER_TYPES, naming.ENV_SERVER)


def services(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """Services of the pods others connect to: ps, workers, env servers (nobody addresses an evaluator)."""
    return [service(job, t, i, options) for t, i in job.topology.slots() if t in ADDRESSED_TYPES]


def tensorboard(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """A TensorBoard Deployment and Service reading the run directory, when the job asks for one."""
    if not job.spec.tensorboard.enabled:
        return []
    options = options or RenderOptions()
    name = naming.tensorboard_name(job.name)
    labels = {naming.LABEL_JOB: job.name, naming.LABEL_COMPONENT: "tensorboard"}
    container = {
        "name": "tensorboard",
        "image": job.spec.tensorboard.image or job.spec.image or options.default_image,
        "command": ["tensorboard"],
        "args": ["--logdir", run_dir(job), "--bind_all", "--port", str(TENSORBOARD_PORT)],
        "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT, "protocol": "TCP"}],
        "volumeMounts": [{"name": RUN_VOLUME, "mountPath": job.spec.storage.path, "readOnly": True}],
        "readinessProbe": {"httpGet": {"path": "/", "port": TENSORBOARD_PORT}, "periodSeconds": 10},
        "env": scratch_env([]),
    }
    pod_spec = {"containers": [container], "volumes": [run_volume(job)]}
    secure(job, pod_spec)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(job, name, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, name, labels),
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": TENSORBOARD_PORT, "protocol": "TCP"}],
        },
    }
    return [deployment, svc, _tensorboard_policy(job, labels)]


def _tensorboard_policy(job: AgentsJob, labels: dict[str, str]) -> dict:
    """TensorBoard has no authentication: only pods of the job's own namespace may reach it (its in-cluster
    URL in status serves them), and `kubectl port-forward`, which no NetworkPolicy governs."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, naming.tensorboard_name(job.name), labels),
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": TENSORBOARD_PORT, "protocol": "TCP"}]}],
        },
    }


def _operator_peer(options: RenderOptions) -> dict:
    """The NetworkPolicy peer of the operator's pods (its namespace by name, and its pods' labels)."""
    namespace = {"matchLabels": {NAMESPACE_NAME_LABEL: options.operator_namespace}}
    return {"namespaceSelector": namespace, "podSelector": {"matchLabels": dict(options.operator_pod_labels)}}


def network_policy(job: AgentsJob, options: RenderOptions | None = None) -> dict:
    """Only the job's own pods may reach its TensorFlow and env-server gRPC ports (neither authenticates).

    A sidecar env server is reached over localhost, which no NetworkPolicy governs; its port is closed to
    other pods like every port not listed here. The chief's metrics port is open to the operator's pods
    only (it reads progress there), and only when the options name the operator's namespace. The TensorBoard
    pod is not selected (it has no replica-type label) and has a policy of its own.
    """
    options = options or RenderOptions()
    replicas = {
        "matchLabels": naming.job_selector(job.name),
        "matchExpressions": [{"key": naming.LABEL_TYPE, "operator": "Exists"}],
    }
    own_ports = [{"port": options.port, "protocol": "TCP"}]
    if job.spec.environments.placement == "remote":
        own_ports.append({"port": job.spec.environments.port, "protocol": "TCP"})
    ingress: list[dict] = [{"from": [{"podSelector": copy.deepcopy(replicas)}], "ports": own_ports}]
    metrics_port = job.config.metrics_port
    if metrics_port and options.operator_namespace:
        ingress.append({"from": [_operator_peer(options)], "ports": [{"port": metrics_port, "protocol": "TCP"}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, naming.network_policy_name(job.name), naming.job_selector(job.name)),
        "spec": {"podSelector": replicas, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def export_status(job: AgentsJob) -> ExportStatus | None:
    """Where the chief of a job that succeeded left its exported policy, when it outlives the pods: with
    `export` on and the run directory on a claim (an emptyDir goes with the chief's pod)."""
    claim = job.spec.storage.persistent_volume_claim
    if not job.config.export or claim is None:
        return None
    return ExportStatus(path=f"{run_dir(job)}/{exported.DIRECTORY}", claim_name=claim.claim_name)


def tensorboard_url(job: AgentsJob) -> str | None:
    """In-cluster URL of the job's TensorBoard."""
    if not job.spec.tensorboard.enabled:
        return None
    return f"http://{naming.tensorboard_name(job.name)}.{job.namespace}.svc"


def children(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """Everything the operator creates for the job: its NetworkPolicy, its cluster's ConfigMap, Services, Pods,
    then TensorBoard."""
    return [*_before_pods(job, options), *pods(job, options), *tensorboard(job, options)]


def _before_pods(job: AgentsJob, options: RenderOptions | None) -> list[dict]:
    return [network_policy(job, options), cluster_config(job, options), *services(job, options)]


def non_pod_children(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """`children` without the pods, in the same order (a test holds them to it).

    What a reconcile compares with the observed ConfigMap, Services, Deployments and NetworkPolicies. Pods are
    left out: a reconcile needs only the pods of its empty slots (`pod`), and rendering all of them on every
    event would cost time linear in the replicas.
    """
    return [*_before_pods(job, options), *tensorboard(job, options)]
