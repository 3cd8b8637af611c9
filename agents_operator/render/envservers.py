"""The env servers' containers: an env-server pod's main container (placement remote) or a replica's native
sidecar (placement sidecar), what they run and how the kubelet probes them. Pure module."""

from __future__ import annotations

import copy

from agents_operator import launch
from agents_operator.api import AgentsJob
from agents_operator.launch import Launch
from agents_operator.render.common import ENV_PORT_NAME, TERMINATION_MESSAGE_POLICY, RenderOptions, scratch_env
from agents_operator.topology import EnvServerShare

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


def env_server_container(job: AgentsJob, given: dict, serves: Launch, options: RenderOptions) -> dict:
    """The env-server container: `given` (from a template, or just a name) with `serves`'s command (unless the
    template gives its own) and environment, its port and probes."""
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
    fields = launch.container(serves)
    if "command" not in container and "args" not in container:
        container["command"], container["args"] = fields["command"], fields["args"]
    extra = [*(server.env or []), *fields["env"]]
    names = {e.get("name") for e in container.get("env", [])}
    container["env"] = container.get("env", []) + [copy.deepcopy(e) for e in extra if e.get("name") not in names]
    container["env"] += scratch_env(container["env"])
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
