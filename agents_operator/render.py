"""AgentsJob -> the exact Pods and Services the operator creates, as plain dicts.

The operator creates what this returns and the local launcher runs the same commands with the same
environment, so what `agents-operator render` prints is what runs. Pure module.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from agents_operator import __version__, naming, tfconfig
from agents_operator.api import AgentsJob, ReplicaSpec

DEFAULT_IMAGE = f"agents-operator:{__version__}"
TRAINER_CONTAINER = "agents"
RUN_VOLUME = "agents-run"
GRPC_PORT_NAME = "tf-grpc"
METRICS_PORT_NAME = "metrics"
TENSORBOARD_PORT = 6006
RUN_AS = 1000
"""Non-root UID and GID of the image's user; pods run as it unless their template says otherwise."""

POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class RenderOptions:
    """Settings of the operator (or launcher) that rendering needs beyond the job itself."""

    default_image: str = DEFAULT_IMAGE
    port: int = tfconfig.DEFAULT_PORT


def run_dir(job: AgentsJob) -> str:
    """The job's run directory inside its pods: checkpoints, summaries, videos, logs."""
    return f"{job.spec.storage.path.rstrip('/')}/{job.name}"


def _flag_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def trainer_args(job: AgentsJob) -> list[str]:
    """Arguments of `agents-operator` that run this job's trainer in any role (TF_CONFIG says which)."""
    args = ["train", "--config", job.spec.trainer.preset]
    overrides = job.spec.trainer.model_dump(exclude={"preset"}, exclude_unset=True)
    for key in sorted(overrides):
        args += ["--set", f"{key}={_flag_value(overrides[key])}"]
    return [*args, "--logdir", run_dir(job), "--resume"]


def owner_reference(job: AgentsJob) -> dict | None:
    """Makes the job own a child (deleting the job deletes it); None before the API server gave a uid."""
    if not job.metadata.uid:
        return None
    return {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "name": job.name,
        "uid": job.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(job: AgentsJob, name: str, labels: dict[str, str], annotations: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": job.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    owner = owner_reference(job)
    if owner:
        meta["ownerReferences"] = [owner]
    return meta


def _merge_defaults(defaults: dict, given: dict | None) -> dict:
    """`given` with `defaults` filled in where it says nothing (recursively for mappings)."""
    out = copy.deepcopy(defaults)
    for key, value in (given or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_defaults(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _trainer_index(containers: list[dict]) -> int:
    names = [c.get("name") for c in containers]
    return names.index(TRAINER_CONTAINER) if TRAINER_CONTAINER in names else 0


def _env(job: AgentsJob, replica_type: str, index: int, options: RenderOptions) -> list[dict]:
    tf_config = tfconfig.build(
        job.name, job.namespace, job.spec.replica_specs.counts(), replica_type, index, options.port
    )
    values = {
        tfconfig.ENV_VAR: tf_config.to_json(),
        "AGENTS_JOB_NAME": job.name,
        "AGENTS_NAMESPACE": job.namespace,
        "AGENTS_REPLICA_TYPE": replica_type,
        "AGENTS_REPLICA_INDEX": str(index),
        "AGENTS_LOGDIR": run_dir(job),
        "PYTHONUNBUFFERED": "1",
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def _ports(job: AgentsJob, replica_type: str, index: int, options: RenderOptions) -> list[dict]:
    ports = []
    if replica_type in tfconfig.CLUSTER_TYPES:
        ports.append({"name": GRPC_PORT_NAME, "containerPort": options.port, "protocol": "TCP"})
    metrics_port = job.trainer_config().metrics_port
    if naming.is_chief(replica_type, index) and metrics_port:
        ports.append({"name": METRICS_PORT_NAME, "containerPort": metrics_port, "protocol": "TCP"})
    return ports


def _volume(job: AgentsJob) -> dict:
    storage = job.spec.storage
    if storage.persistent_volume_claim:
        return {"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": storage.persistent_volume_claim.claim_name}}
    source = storage.empty_dir.model_dump(by_alias=True, exclude_none=True) if storage.empty_dir else {}
    return {"name": RUN_VOLUME, "emptyDir": {k: v for k, v in source.items() if v != ""}}


def _trainer_container(job: AgentsJob, given: dict, replica_type: str, index: int, options: RenderOptions) -> dict:
    container = copy.deepcopy(given)
    container.setdefault("image", job.spec.image or options.default_image)
    if job.spec.image_pull_policy:
        container.setdefault("imagePullPolicy", job.spec.image_pull_policy)
    if "command" not in container and "args" not in container:
        container["command"] = ["agents-operator"]
        container["args"] = trainer_args(job)
    ours = _env(job, replica_type, index, options)
    names = {e["name"] for e in ours}
    container["env"] = [e for e in container.get("env", []) if e.get("name") not in names] + ours
    port_names = {p.get("name") for p in container.get("ports", [])}
    container["ports"] = container.get("ports", []) + [
        p for p in _ports(job, replica_type, index, options) if p["name"] not in port_names
    ]
    mounts = [m for m in container.get("volumeMounts", []) if m.get("name") != RUN_VOLUME]
    container["volumeMounts"] = [*mounts, {"name": RUN_VOLUME, "mountPath": job.spec.storage.path}]
    container["securityContext"] = _merge_defaults(CONTAINER_SECURITY, container.get("securityContext"))
    return container


def pod(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The Pod of replica `<job>-<replica_type>-<index>`."""
    options = options or RenderOptions()
    spec: ReplicaSpec = getattr(job.spec.replica_specs, replica_type)
    template = spec.template.model_dump(by_alias=True, exclude_none=True) if spec.template else {}
    template_meta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(template.get("spec") or {"containers": [{"name": TRAINER_CONTAINER}]})

    containers = pod_spec["containers"]
    trainer = _trainer_index(containers)
    containers[trainer] = _trainer_container(job, containers[trainer], replica_type, index, options)
    for i, container in enumerate(containers):
        if i != trainer:
            container.setdefault("image", job.spec.image or options.default_image)
            container["securityContext"] = _merge_defaults(CONTAINER_SECURITY, container.get("securityContext"))

    # The operator replaces failed pods itself, so that every restart counts against backoffLimit.
    pod_spec["restartPolicy"] = "Never"
    pod_spec["securityContext"] = _merge_defaults(POD_SECURITY, pod_spec.get("securityContext"))
    pod_spec["volumes"] = [v for v in pod_spec.get("volumes", []) if v.get("name") != RUN_VOLUME] + [_volume(job)]
    scheduling = job.spec.run_policy.scheduling_policy
    if scheduling and scheduling.scheduler_name:
        pod_spec.setdefault("schedulerName", scheduling.scheduler_name)
    if scheduling and scheduling.priority_class:
        pod_spec.setdefault("priorityClassName", scheduling.priority_class)

    labels = {**(template_meta.get("labels") or {}), **naming.replica_labels(job.name, replica_type, index)}
    if scheduling and scheduling.queue:
        labels[QUEUE_LABEL] = scheduling.queue
    name = naming.child_name(job.name, replica_type, index)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name, labels, template_meta.get("annotations")),
        "spec": pod_spec,
    }


def service(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The headless Service that gives replica `<job>-<type>-<index>` its stable DNS name."""
    options = options or RenderOptions()
    name = naming.child_name(job.name, replica_type, index)
    selector = {naming.LABEL_JOB: job.name, naming.LABEL_TYPE: replica_type, naming.LABEL_INDEX: str(index)}
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["containerPort"], "protocol": "TCP"}
        for p in _ports(job, replica_type, index, options)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, naming.replica_labels(job.name, replica_type, index)),
        "spec": {
            "clusterIP": "None",
            # Resolve before the pod is ready: TF servers connect to each other while starting.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": ports,
        },
    }


def replicas(job: AgentsJob) -> list[tuple[str, int]]:
    """(type, index) of every replica of the job, ps first."""
    return [(t, i) for t, spec in job.spec.replica_specs.items() for i in range(spec.replicas)]


def services(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """Services of the cluster members (ps and workers; evaluators are not addressed by anyone)."""
    return [service(job, t, i, options) for t, i in replicas(job) if t in tfconfig.CLUSTER_TYPES]


def pods(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    return [pod(job, t, i, options) for t, i in replicas(job)]


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
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(job, name, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "securityContext": copy.deepcopy(POD_SECURITY),
                    "volumes": [_volume(job)],
                },
            },
        },
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, labels),
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": 80, "targetPort": TENSORBOARD_PORT, "protocol": "TCP"}],
        },
    }
    return [deployment, svc]


def network_policy(job: AgentsJob, options: RenderOptions | None = None) -> dict:
    """Only the job's own replicas may reach its TensorFlow gRPC port (the TF runtime has no authentication).

    The chief's metrics port stays open to the operator and Prometheus; other ports of the replica pods are
    closed to ingress. The TensorBoard pod is not selected (it has no replica-type label).
    """
    options = options or RenderOptions()
    replicas = {
        "matchLabels": naming.job_selector(job.name),
        "matchExpressions": [{"key": naming.LABEL_TYPE, "operator": "Exists"}],
    }
    ingress: list[dict] = [
        {
            "from": [{"podSelector": copy.deepcopy(replicas)}],
            "ports": [{"port": options.port, "protocol": "TCP"}],
        }
    ]
    metrics_port = job.trainer_config().metrics_port
    if metrics_port:
        ingress.append({"ports": [{"port": metrics_port, "protocol": "TCP"}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(job, naming.network_policy_name(job.name), naming.job_selector(job.name)),
        "spec": {"podSelector": replicas, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def tensorboard_url(job: AgentsJob) -> str | None:
    """In-cluster URL of the job's TensorBoard."""
    if not job.spec.tensorboard.enabled:
        return None
    return f"http://{naming.tensorboard_name(job.name)}.{job.namespace}.svc"


def children(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """Everything the operator creates for the job: its NetworkPolicy, Services, Pods, then TensorBoard."""
    return [network_policy(job, options), *services(job, options), *pods(job, options), *tensorboard(job, options)]
