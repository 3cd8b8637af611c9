"""What every child of a job is rendered with: the names and numbers they share, the render options, owner
and metadata, the run and scratch volumes, the security defaults and the replica ports. Pure module."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from agents_operator import naming, podsecurity, tfconfig, topology
from agents_operator.api import AgentsJob

DEFAULT_IMAGE = naming.image(naming.TRAINER_IMAGE)
RUN_VOLUME = "agents-run"
SCRATCH_VOLUME = "agents-tmp"
SCRATCH_PATH = "/tmp"
"""An emptyDir on /tmp in every container: root file systems are read-only, and Python, matplotlib, TensorFlow
and the simulators write caches and temporary files."""
SCRATCH_ENV = {
    "HOME": SCRATCH_PATH,
    "TMPDIR": SCRATCH_PATH,
    "XDG_CACHE_HOME": f"{SCRATCH_PATH}/.cache",
    "MPLCONFIGDIR": f"{SCRATCH_PATH}/matplotlib",
}
"""Where the trainer and env server write outside the run directory: all under the scratch volume."""
CLUSTER_VOLUME = "agents-cluster"
CLUSTER_PATH = "/etc/agents-operator"
"""Where each trainer container mounts the job's ConfigMap: its cluster is the file CLUSTER_FILE."""
CLUSTER_FILE = f"{CLUSTER_PATH}/{tfconfig.CLUSTER_KEY}"
GRPC_PORT_NAME = "tf-grpc"
ENV_PORT_NAME = "env-grpc"
METRICS_PORT_NAME = "metrics"
TENSORBOARD_PORT = 6006
RUN_AS = 1000
"""Non-root UID and GID of the image's user; pods run as it unless their template says otherwise."""
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""A container that fails without writing /dev/termination-log leaves the end of its log as its termination
message, which the job's Failed condition and PodFailed Events quote (`rules.describe`)."""
POD_SECURITY = {**podsecurity.POD_DEFAULTS, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS}
CONTAINER_SECURITY = {**podsecurity.CONTAINER_DEFAULTS, "readOnlyRootFilesystem": True}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace: selects a namespace by name in a NetworkPolicy."""


@dataclass(frozen=True)
class RenderOptions:
    """Settings of the operator (or launcher) that rendering needs beyond the job itself."""

    default_image: str = DEFAULT_IMAGE
    port: int = tfconfig.DEFAULT_PORT
    operator_namespace: str | None = None
    """The operator's namespace: with `operator_pod_labels`, who may read the chief's metrics port. None (an
    offline render): nobody may."""
    operator_pod_labels: tuple[tuple[str, str], ...] = ()
    """Labels of the operator's pods (pairs, so that options stay hashable); empty: any pod of its namespace."""


def run_dir(job: AgentsJob) -> str:
    """The job's run directory inside its pods: checkpoints, summaries, videos, logs."""
    return f"{job.spec.storage.path.rstrip('/')}/{job.name}"


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


def metadata(job: AgentsJob, name: str, labels: dict[str, str], annotations: dict | None = None) -> dict:
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


def container_ports(job: AgentsJob, replica_type: str, index: int, options: RenderOptions) -> list[dict]:
    if replica_type == naming.ENV_SERVER:
        return [{"name": ENV_PORT_NAME, "containerPort": job.spec.environments.port, "protocol": "TCP"}]
    ports = []
    if replica_type in tfconfig.CLUSTER_TYPES:
        ports.append({"name": GRPC_PORT_NAME, "containerPort": options.port, "protocol": "TCP"})
    metrics_port = job.config.metrics_port
    if topology.is_chief(replica_type, index) and metrics_port:
        ports.append({"name": METRICS_PORT_NAME, "containerPort": metrics_port, "protocol": "TCP"})
    return ports


def run_volume(job: AgentsJob) -> dict:
    storage = job.spec.storage
    if storage.persistent_volume_claim:
        return {"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": storage.persistent_volume_claim.claim_name}}
    source = storage.empty_dir.model_dump(by_alias=True, exclude_none=True) if storage.empty_dir else {}
    return {"name": RUN_VOLUME, "emptyDir": {k: v for k, v in source.items() if v != ""}}


def scratch_env(env: list[dict]) -> list[dict]:
    """SCRATCH_ENV's variables that `env` does not set itself."""
    names = {e.get("name") for e in env}
    return [{"name": k, "value": v} for k, v in SCRATCH_ENV.items() if k not in names]


def secure(job: AgentsJob, spec: dict) -> None:
    """Restricted defaults, in place, on the pod and every container (the operator's, the template's extra
    and init containers, the env-server sidecar): what the template sets wins, except that a Restricted job
    gets every field Pod Security "restricted" constrains forced to a value it allows. Each container gets
    /tmp from the scratch volume (root file systems are read-only), and the pod no service-account token
    unless its template names an account: training talks to no API server."""
    for containers in podsecurity.CONTAINER_LISTS:
        for container in spec.get(containers) or []:
            container["securityContext"] = _merge_defaults(CONTAINER_SECURITY, container.get("securityContext"))
            mounts = container.get("volumeMounts") or []
            if not any(m.get("mountPath") == SCRATCH_PATH for m in mounts):
                container["volumeMounts"] = [*mounts, {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH}]
    spec["securityContext"] = _merge_defaults(POD_SECURITY, spec.get("securityContext"))
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != SCRATCH_VOLUME]
    spec["volumes"] = [*volumes, {"name": SCRATCH_VOLUME, "emptyDir": {}}]
    if not (spec.get("serviceAccountName") or spec.get("serviceAccount")):
        spec.setdefault("automountServiceAccountToken", False)
    if job.spec.pod_security == podsecurity.RESTRICTED:
        podsecurity.restrict_pod_spec(spec)


def replica_labels(job: AgentsJob, replica_type: str, index: int) -> dict[str, str]:
    """The labels of a replica's pod and Service: the chief's also say it is the chief."""
    labels = naming.replica_labels(job.name, replica_type, index)
    if topology.is_chief(replica_type, index):
        labels[naming.LABEL_ROLE] = naming.ROLE_CHIEF
    return labels
