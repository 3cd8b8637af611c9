"""AgentsJob -> the exact Pods and Services the operator creates, as plain dicts.

The operator creates what this returns and the local launcher runs the same commands with the same
environment, so what `agents-operator render` prints is what runs. Pure module.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from agents_operator import exported, launch, naming, podsecurity, tfconfig, topology
from agents_operator.api import AgentsJob, ExportStatus
from agents_operator.launch import Launch
from agents_operator.topology import EnvServerShare

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
GRPC_PORT_NAME = "tf-grpc"
ENV_PORT_NAME = "env-grpc"
METRICS_PORT_NAME = "metrics"
TENSORBOARD_PORT = 6006
RUN_AS = 1000
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""A container that fails without writing /dev/termination-log leaves the end of its log as its termination
message, which the job's Failed condition and PodFailed Events quote (`rules.describe`)."""
"""Non-root UID and GID of the image's user; pods run as it unless their template says otherwise."""

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


def trainer_launch(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> Launch:
    """What the trainer of replica `<job>-<replica_type>-<index>` runs: the job's preset and overrides in its run
    directory, resuming what is there, in the role its TF_CONFIG gives it."""
    options = options or RenderOptions()
    layout = job.topology
    servers = layout.env_server_addresses(replica_type, index)
    return Launch(
        program=launch.TRAIN,
        options=(("config", job.spec.trainer.preset),),
        settings=job.overrides,
        logdir=run_dir(job),
        resume=True,
        job=job.name,
        namespace=job.namespace,
        peers=tfconfig.build(job.name, job.namespace, layout.counts, replica_type, index, options.port),
        env_servers=tfconfig.EnvServers(servers, job.spec.environments.mode) if servers else None,
    )


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


def _ports(job: AgentsJob, replica_type: str, index: int, options: RenderOptions) -> list[dict]:
    if replica_type == naming.ENV_SERVER:
        return [{"name": ENV_PORT_NAME, "containerPort": job.spec.environments.port, "protocol": "TCP"}]
    ports = []
    if replica_type in tfconfig.CLUSTER_TYPES:
        ports.append({"name": GRPC_PORT_NAME, "containerPort": options.port, "protocol": "TCP"})
    metrics_port = job.config.metrics_port
    if topology.is_chief(replica_type, index) and metrics_port:
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
    container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)
    fields = launch.container(trainer_launch(job, replica_type, index, options))
    if "command" not in container and "args" not in container:
        container["command"], container["args"] = fields["command"], fields["args"]
    ours = fields["env"]
    names = {e["name"] for e in ours}
    container["env"] = [e for e in container.get("env", []) if e.get("name") not in names] + ours
    port_names = {p.get("name") for p in container.get("ports", [])}
    container["ports"] = container.get("ports", []) + [
        p for p in _ports(job, replica_type, index, options) if p["name"] not in port_names
    ]
    container["env"] += _scratch_env(container["env"])
    mounts = [m for m in container.get("volumeMounts", []) if m.get("name") != RUN_VOLUME]
    container["volumeMounts"] = [*mounts, {"name": RUN_VOLUME, "mountPath": job.spec.storage.path}]
    return container


def _scratch_env(env: list[dict]) -> list[dict]:
    """SCRATCH_ENV's variables that `env` does not set itself."""
    names = {e.get("name") for e in env}
    return [{"name": k, "value": v} for k, v in SCRATCH_ENV.items() if k not in names]


def _secure(job: AgentsJob, spec: dict) -> None:
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


def pod(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The Pod of child `<job>-<replica_type>-<index>`: a replica, or an env server of a remote placement."""
    options = options or RenderOptions()
    if replica_type == naming.ENV_SERVER:
        given = job.spec.environments.server.template
    else:
        given = getattr(job.spec.replica_specs, replica_type).template
    template = given.model_dump(by_alias=True, exclude_none=True) if given else {}
    template_meta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(template.get("spec") or {"containers": [{"name": naming.main_container(replica_type)}]})
    _add_programs(job, pod_spec, replica_type, index, options)

    # The operator replaces failed pods itself, so that every restart counts against backoffLimit.
    pod_spec["restartPolicy"] = "Never"
    if replica_type != naming.ENV_SERVER:
        pod_spec["volumes"] = [v for v in pod_spec.get("volumes", []) if v.get("name") != RUN_VOLUME] + [_volume(job)]
    _secure(job, pod_spec)
    scheduling = job.spec.run_policy.scheduling_policy
    if scheduling and scheduling.scheduler_name:
        pod_spec.setdefault("schedulerName", scheduling.scheduler_name)
    if scheduling and scheduling.priority_class:
        pod_spec.setdefault("priorityClassName", scheduling.priority_class)

    labels = {**(template_meta.get("labels") or {}), **_replica_labels(job, replica_type, index)}
    if scheduling and scheduling.queue:
        labels[QUEUE_LABEL] = scheduling.queue
    name = naming.child_name(job.name, replica_type, index)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, name, labels, template_meta.get("annotations")),
        "spec": pod_spec,
    }


def _add_programs(job: AgentsJob, pod_spec: dict, replica_type: str, index: int, options: RenderOptions) -> None:
    """Our programs in a pod's containers, in place: its main container's (the trainer, or the env server of an
    env-server pod), and the env-server sidecar of a sidecar placement; the other containers get an image."""
    containers = pod_spec["containers"]
    main = naming.main_index([c.get("name") for c in containers], replica_type)
    if replica_type == naming.ENV_SERVER:
        share = job.topology.remote_share(index)
        containers[main] = _env_server_container(job, containers[main], share, options)
    else:
        containers[main] = _trainer_container(job, containers[main], replica_type, index, options)
    for i, container in enumerate(containers):
        if i != main:
            container.setdefault("image", job.spec.image or options.default_image)
    share = sidecar_share(job, replica_type, index)
    if share is not None:
        # A native sidecar: started before the trainer, restarted by the kubelet, stopped after it.
        sidecar = {
            **_env_server_container(job, {"name": naming.ENV_SERVER_CONTAINER}, share, options),
            "restartPolicy": "Always",
        }
        others = [c for c in pod_spec.get("initContainers", []) if c.get("name") != naming.ENV_SERVER_CONTAINER]
        pod_spec["initContainers"] = [*others, sidecar]


def _replica_labels(job: AgentsJob, replica_type: str, index: int) -> dict[str, str]:
    """The labels of a replica's pod and Service: the chief's also say it is the chief."""
    labels = naming.replica_labels(job.name, replica_type, index)
    if topology.is_chief(replica_type, index):
        labels[naming.LABEL_ROLE] = naming.ROLE_CHIEF
    return labels


# --- env servers -----------------------------------------------------------------------------------------

PROBE_PERIOD_SECONDS = 5
STARTUP_PROBE_SECONDS = 300
"""How long an env server may take to start serving (pulling nothing; building its environments)."""


def sidecar_share(job: AgentsJob, replica_type: str, index: int) -> EnvServerShare | None:
    """What the env-server sidecar of a replica's pod simulates, when the placement gives it one."""
    if job.spec.environments.placement != "sidecar":
        return None
    shares = job.topology.env_server_shares(replica_type, index)
    return shares[0] if shares else None


def env_server_launch(job: AgentsJob, share: EnvServerShare) -> Launch:
    """What an env server of the job runs: one share of the environments, on the job's env-server port."""
    config = job.config
    options = [("env", config.env_id), ("envs", str(share.envs)), ("seed", str(share.seed))]
    if config.max_episode_steps is not None:
        options.append(("max-episode-steps", str(config.max_episode_steps)))
    if config.envs_per_process is not None:
        options.append(("envs-per-process", str(config.envs_per_process)))
    return Launch(program=launch.ENV_SERVER, options=tuple(options), port=job.spec.environments.port)


def _env_server_container(job: AgentsJob, given: dict, share: EnvServerShare, options: RenderOptions) -> dict:
    """The env-server container: `given` (from a template, or just a name) with its command, port and probes."""
    server = job.spec.environments.server
    port = job.spec.environments.port
    container = copy.deepcopy(given)
    container.setdefault("image", server.image or job.spec.image or options.default_image)
    pull_policy = server.image_pull_policy or (None if server.image else job.spec.image_pull_policy)
    if pull_policy:
        container.setdefault("imagePullPolicy", pull_policy)
    if server.resources is not None:
        container.setdefault("resources", copy.deepcopy(server.resources))
    container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)
    fields = launch.container(env_server_launch(job, share))
    if "command" not in container and "args" not in container:
        container["command"], container["args"] = fields["command"], fields["args"]
    extra = [*(server.env or []), *fields["env"]]
    names = {e.get("name") for e in container.get("env", [])}
    container["env"] = container.get("env", []) + [copy.deepcopy(e) for e in extra if e.get("name") not in names]
    container["env"] += _scratch_env(container["env"])
    ports = [p for p in container.get("ports", []) if p.get("name") != ENV_PORT_NAME]
    container["ports"] = [*ports, {"name": ENV_PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    grpc = {"grpc": {"port": port}}
    container.setdefault(
        "startupProbe",
        {**grpc, "periodSeconds": 2, "failureThreshold": STARTUP_PROBE_SECONDS // 2},
    )
    container.setdefault("readinessProbe", {**grpc, "periodSeconds": PROBE_PERIOD_SECONDS})
    container.setdefault("livenessProbe", {**grpc, "periodSeconds": 2 * PROBE_PERIOD_SECONDS, "failureThreshold": 6})
    return container


def service(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The headless Service that gives replica `<job>-<type>-<index>` its stable DNS name."""
    options = options or RenderOptions()
    name = naming.child_name(job.name, replica_type, index)
    selector = naming.replica_labels(job.name, replica_type, index)
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["containerPort"], "protocol": "TCP"}
        for p in _ports(job, replica_type, index, options)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, name, _replica_labels(job, replica_type, index)),
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


def pods(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    return [pod(job, t, i, options) for t, i in job.topology.slots()]


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
        "env": _scratch_env([]),
    }
    pod_spec = {"containers": [container], "volumes": [_volume(job)]}
    _secure(job, pod_spec)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(job, name, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
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
    return [deployment, svc, _tensorboard_policy(job, labels)]


def _tensorboard_policy(job: AgentsJob, labels: dict[str, str]) -> dict:
    """TensorBoard has no authentication: only pods of the job's own namespace may reach it (its in-cluster
    URL in status serves them), and `kubectl port-forward`, which no NetworkPolicy governs."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(job, naming.tensorboard_name(job.name), labels),
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
        "metadata": _metadata(job, naming.network_policy_name(job.name), naming.job_selector(job.name)),
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
    """Everything the operator creates for the job: its NetworkPolicy, Services, Pods, then TensorBoard."""
    return [network_policy(job, options), *services(job, options), *pods(job, options), *tensorboard(job, options)]


def non_pod_children(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    """`children` without the pods, in the same order (a test holds them to it).

    What a reconcile compares with the observed Services, Deployments and NetworkPolicies. Pods are left out
    because each carries a TF_CONFIG naming every member of the cluster: rendering all of them costs time
    quadratic in the replicas, and a reconcile needs only the pods of its empty slots (`pod`).
    """
    return [network_policy(job, options), *services(job, options), *tensorboard(job, options)]
