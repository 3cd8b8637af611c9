"""The job's pods: each replica's (and env server's) Pod, from its template with our programs in it, and the
launch each of our containers runs. Pure module."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

from agents_operator import launch, naming, tfconfig
from agents_operator.api import AgentsJob
from agents_operator.launch import Launch
from agents_operator.render.common import (
    CLUSTER_FILE,
    CLUSTER_PATH,
    CLUSTER_VOLUME,
    QUEUE_LABEL,
    RUN_VOLUME,
    TERMINATION_MESSAGE_POLICY,
    RenderOptions,
    container_ports,
    metadata,
    replica_labels,
    run_dir,
    run_volume,
    scratch_env,
    secure,
)
from agents_operator.render.envservers import env_server_container, env_server_launch, sidecar_share


def trainer_launch(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> Launch:
    """What the trainer of replica `<job>-<replica_type>-<index>` runs: the job's preset and overrides in its run
    directory, resuming what is there, in the role its TF_CONFIG gives it, the cluster read from the job's
    ConfigMap (`cluster_config`)."""
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
        peers=tfconfig.build(job.name, job.namespace, layout.members, replica_type, index, options.port),
        cluster_file=CLUSTER_FILE,
        env_servers=tfconfig.EnvServers(servers, job.spec.environments.mode) if servers else None,
    )


def _trainer_container(
    job: AgentsJob, given: dict, runs: Launch, replica_type: str, index: int, options: RenderOptions
) -> dict:
    """The trainer's container: `given` (from a template, or just a name) with `runs`'s command (unless the
    template gives its own) and environment, its ports, the run directory and the cluster's ConfigMap mounted."""
    container = copy.deepcopy(given)
    container.setdefault("image", job.spec.image or options.default_image)
    if job.spec.image_pull_policy:
        container.setdefault("imagePullPolicy", job.spec.image_pull_policy)
    container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)
    fields = launch.container(runs)
    if "command" not in container and "args" not in container:
        container["command"], container["args"] = fields["command"], fields["args"]
    ours = fields["env"]
    names = {e["name"] for e in ours}
    container["env"] = [e for e in container.get("env", []) if e.get("name") not in names] + ours
    port_names = {p.get("name") for p in container.get("ports", [])}
    container["ports"] = container.get("ports", []) + [
        p for p in container_ports(job, replica_type, index, options) if p["name"] not in port_names
    ]
    container["env"] += scratch_env(container["env"])
    ours = [{"name": RUN_VOLUME, "mountPath": job.spec.storage.path}]
    if runs.cluster_file is not None:
        ours.append({"name": CLUSTER_VOLUME, "mountPath": CLUSTER_PATH, "readOnly": True})
    mounts = [m for m in container.get("volumeMounts", []) if m.get("name") not in (RUN_VOLUME, CLUSTER_VOLUME)]
    container["volumeMounts"] = [*mounts, *ours]
    return container


def cluster_config(job: AgentsJob, options: RenderOptions | None = None) -> dict:
    """The job's ConfigMap: its cluster (`tfconfig.cluster_json`), once for every pod, which mounts it. Immutable:
    the cluster lists every worker slot an elastic job may fill, so no scale changes it, and the kubelets need
    not watch it."""
    options = options or RenderOptions()
    cluster = tfconfig.cluster_spec(job.name, job.namespace, job.topology.members, options.port)
    name = naming.cluster_config_name(job.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, name, naming.job_selector(job.name)),
        "immutable": True,
        "data": {tfconfig.CLUSTER_KEY: tfconfig.cluster_json(cluster)},
    }


@dataclass(frozen=True)
class RenderedPod:
    """A pod as rendered, with the launch each of our containers was rendered from: the operator creates
    `pod`, the local launcher runs `launches` (by container name) without deriving them again."""

    pod: dict
    launches: dict[str, Launch]


def pod(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> dict:
    """The Pod of child `<job>-<replica_type>-<index>`: a replica, or an env server of a remote placement."""
    return rendered_pod(job, replica_type, index, options).pod


def rendered_pod(job: AgentsJob, replica_type: str, index: int, options: RenderOptions | None = None) -> RenderedPod:
    """`pod`, with the launches of its containers."""
    options = options or RenderOptions()
    if replica_type == naming.ENV_SERVER:
        given = job.spec.environments.server.template
    else:
        given = getattr(job.spec.replica_specs, replica_type).template
    template = given.model_dump(by_alias=True, exclude_none=True) if given else {}
    template_meta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(template.get("spec") or {"containers": [{"name": naming.main_container(replica_type)}]})
    launches = _add_programs(job, pod_spec, replica_type, index, options)

    # The operator replaces failed pods itself, so that every restart counts against backoffLimit.
    pod_spec["restartPolicy"] = "Never"
    if replica_type != naming.ENV_SERVER:
        ours = [run_volume(job)]
        if any(r.cluster_file is not None for r in launches.values()):
            ours.append({"name": CLUSTER_VOLUME, "configMap": {"name": naming.cluster_config_name(job.name)}})
        names = {v["name"] for v in ours}
        pod_spec["volumes"] = [v for v in pod_spec.get("volumes", []) if v.get("name") not in names] + ours
    secure(job, pod_spec)
    scheduling = job.spec.run_policy.scheduling_policy
    if scheduling and scheduling.scheduler_name:
        pod_spec.setdefault("schedulerName", scheduling.scheduler_name)
    if scheduling and scheduling.priority_class:
        pod_spec.setdefault("priorityClassName", scheduling.priority_class)

    labels = {**(template_meta.get("labels") or {}), **replica_labels(job, replica_type, index)}
    if scheduling and scheduling.queue:
        labels[QUEUE_LABEL] = scheduling.queue
    name = naming.child_name(job.name, replica_type, index)
    meta = metadata(job, name, labels, template_meta.get("annotations"))
    return RenderedPod({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}, launches)


def _add_programs(
    job: AgentsJob, pod_spec: dict, replica_type: str, index: int, options: RenderOptions
) -> dict[str, Launch]:
    """Our programs in a pod's containers, in place: its main container's (the trainer, or the env server of an
    env-server pod), and the env-server sidecar of a sidecar placement; the other containers get an image.
    Returns the launch of each container it gave a program, by name."""
    containers = pod_spec["containers"]
    main = naming.main_index([c.get("name") for c in containers], replica_type)
    if replica_type == naming.ENV_SERVER:
        runs = env_server_launch(job, job.topology.remote_share(index))
        containers[main] = env_server_container(job, containers[main], runs, options)
    else:
        runs = trainer_launch(job, replica_type, index, options)
        if "command" in containers[main] or "args" in containers[main]:
            # A program of the template's own reads the standard TF_CONFIG, with its cluster.
            runs = replace(runs, cluster_file=None)
        containers[main] = _trainer_container(job, containers[main], runs, replica_type, index, options)
    launches = {containers[main]["name"]: runs}
    for i, container in enumerate(containers):
        if i != main:
            container.setdefault("image", job.spec.image or options.default_image)
    share = sidecar_share(job, replica_type, index)
    if share is not None:
        # A native sidecar: started before the trainer, restarted by the kubelet, stopped after it.
        serves = env_server_launch(job, share)
        sidecar = {
            **env_server_container(job, {"name": naming.ENV_SERVER_CONTAINER}, serves, options),
            "restartPolicy": "Always",
        }
        others = [c for c in pod_spec.get("initContainers", []) if c.get("name") != naming.ENV_SERVER_CONTAINER]
        pod_spec["initContainers"] = [*others, sidecar]
        launches[naming.ENV_SERVER_CONTAINER] = serves
    return launches


def pods(job: AgentsJob, options: RenderOptions | None = None) -> list[dict]:
    return [pod(job, t, i, options) for t, i in job.topology.slots()]
