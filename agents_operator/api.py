"""The AgentsJob API: one pydantic model for spec and status, and its validation rules.

Everything that checks an AgentsJob comes from here: `crd.py` turns these models and `RULES` into the
CRD's OpenAPI schema and CEL rules (so `kubectl apply` rejects what `agents-operator validate` rejects),
the operator and the local launcher parse manifests with `parse_job`. Pure module.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from agents_operator import naming, podsecurity, presets, tfconfig
from agents_operator.config import TrainerConfig, camel_name
from agents_operator.topology import Topology, env_server_count

RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None"]
SuccessPolicy = Literal["ChiefWorker", "AllWorkers"]
CONDITION_TYPES = ("Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "ReplicaFailure")
CREATED, RUNNING, RESTARTING, SUCCEEDED, FAILED, SUSPENDED, REPLICA_FAILURE = CONDITION_TYPES
ConditionType = Literal[CONDITION_TYPES]  # type: ignore[valid-type]
ShortText = Annotated[str, Field(max_length=253)]
DEFAULT_ENV_SERVER_PORT = 50051
STORAGE_PATH = r"^(/([^/\s.][^/\s]*|\.[^/\s.][^/\s]*|\.\.[^/\s]+))+$"
"""Absolute paths of named segments: '/', '//', '/a/', '.' and '..' segments and whitespace do not match
(a mount at '/' would hide the image; '..' would leave the volume). RE2 has no lookahead, hence the three
spellings of a segment that is neither '.' nor '..'."""
LabelValue = Annotated[str, Field(max_length=naming.LABEL_VALUE_MAX, pattern=naming.LABEL_VALUE)]
QualifiedName = Annotated[str, Field(max_length=naming.QUALIFIED_NAME_MAX, pattern=naming.QUALIFIED_NAME)]


def _nullable(annotation: Any) -> bool:
    """Whether a field's type admits None (its CRD property is `nullable`)."""
    if annotation is None or annotation is type(None):
        return True
    if typing.get_origin(annotation) is Annotated:
        return _nullable(typing.get_args(annotation)[0])
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return is_union and type(None) in typing.get_args(annotation)


class CamelModel(BaseModel):
    """Our own API objects: camelCase on the wire, unknown fields rejected, no infinities or NaN (JSON has
    none, so the API server never sees one)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_disallowed_nulls(cls, data: Any) -> Any:
        """Drop a null where the field does not admit one, as the API server does before defaulting (a
        structural schema prunes nulls of non-nullable fields), so the default applies here too."""
        if not isinstance(data, dict):
            return data
        fields = {info.alias or name: info for name, info in cls.model_fields.items()}
        fields.update(cls.model_fields)
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in fields or _nullable(fields[key].annotation)
        }


class KubeModel(BaseModel):
    """A Kubernetes object we only partly model: fields we don't name are kept as they are."""

    model_config = ConfigDict(extra="allow")


# --- pod template ----------------------------------------------------------------------------------------


Text64 = Annotated[str, Field(max_length=64)]


class Profile(KubeModel):
    type: str | None = Field(
        None, max_length=32, description="RuntimeDefault or Localhost under podSecurity Restricted."
    )


class SELinuxOptions(KubeModel):
    type: str | None = Field(None, max_length=253)
    user: str | None = Field(None, max_length=253)
    role: str | None = Field(None, max_length=253)


class WindowsOptions(KubeModel):
    host_process: bool | None = Field(None, alias="hostProcess")


class Capabilities(KubeModel):
    add: list[Text64] | None = Field(None, max_length=64)
    drop: list[Text64] | None = Field(None, max_length=64)


class Sysctl(KubeModel):
    name: str = Field(max_length=253)


# The security fields below are modelled (the rest of a pod spec is kept as given) so that the CRD's CEL rules
# can see them: an object that keeps unknown fields shows CEL only the fields its schema names.


class SecurityContext(KubeModel):
    """The fields of a (pod or container) security context that Pod Security "restricted" constrains."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    run_as_non_root: bool | None = None
    run_as_user: int | None = None
    seccomp_profile: Profile | None = None
    app_armor_profile: Profile | None = None
    se_linux_options: SELinuxOptions | None = Field(None, alias="seLinuxOptions")
    windows_options: WindowsOptions | None = None


class ContainerSecurityContext(SecurityContext):
    privileged: bool | None = None
    allow_privilege_escalation: bool | None = None
    capabilities: Capabilities | None = None
    proc_mount: str | None = Field(None, max_length=32)


class PodSecurityContext(SecurityContext):
    sysctls: list[Sysctl] | None = Field(None, max_length=64)


class ContainerPort(KubeModel):
    host_port: int | None = Field(None, alias="hostPort")


class Container(KubeModel):
    name: str = Field(max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="Container name.")
    image: str | None = Field(None, max_length=1024, description="Image; defaults to spec.image.")
    security_context: ContainerSecurityContext | None = Field(None, alias="securityContext")
    ports: list[ContainerPort] | None = Field(None, max_length=64, description="ContainerPort objects; ours are added.")
    # Typed because the render edits them: a malformed one is refused here and by the API server.
    env: list[dict[str, Any]] | None = Field(None, description="EnvVar objects; the operator adds its own.")
    volume_mounts: list[dict[str, Any]] | None = Field(
        None, alias="volumeMounts", description="VolumeMount objects; the run directory's is added."
    )


def _volume_model() -> type[BaseModel]:
    """A Volume, with every node-bound source type named (see `podsecurity.NODE_VOLUME_TYPES`)."""
    fields: dict[str, Any] = {"name": (str, Field(max_length=63))}
    fields.update({t: (dict[str, Any] | None, None) for t in podsecurity.NODE_VOLUME_TYPES})
    return create_model("Volume", __base__=KubeModel, **fields)


Volume = _volume_model()


class PodSpec(KubeModel):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel)
    containers: list[Container] = Field(
        min_length=1,
        max_length=32,
        description=f"Containers of the replica. The one named '{naming.TRAINER_CONTAINER}' (or else the first) runs "
        "the trainer.",
    )
    init_containers: list[Container] | None = Field(
        None, max_length=32, description="Init containers (Container objects)."
    )
    volumes: list[Volume] | None = Field(  # type: ignore[valid-type]
        None, max_length=256, description="Volume objects; the run directory's is added."
    )
    host_network: bool | None = None
    host_pid: bool | None = Field(None, alias="hostPID")
    host_ipc: bool | None = Field(None, alias="hostIPC")
    security_context: PodSecurityContext | None = None


class TemplateMeta(KubeModel):
    labels: dict[str, LabelValue] | None = Field(None, description="Labels of the pods (ours are added).")
    annotations: dict[str, str] | None = Field(None, description="Annotations of the pods.")


class PodTemplate(KubeModel):
    """A PodTemplateSpec. Every field the user sets is kept; the operator adds its own."""

    metadata: TemplateMeta | None = Field(None, description="Labels and annotations for the pods.")
    spec: PodSpec


# --- spec ------------------------------------------------------------------------------------------------


class ReplicaSpec(CamelModel):
    replicas: int = Field(1, ge=1, le=naming.MAX_REPLICAS, description="Number of pods of this type.")
    restart_policy: RestartPolicy = Field(
        "OnFailure",
        description="What a failed pod leads to. Always/OnFailure: the operator replaces it. ExitCode: exit "
        "codes 1-127 fail the job, 128 and above (signals, OOM kill, eviction) are retried. Never: the job "
        "fails. Restarts of all replicas count against runPolicy.backoffLimit.",
    )
    template: PodTemplate | None = Field(
        None, description=f"Pod template; omitted means one '{naming.TRAINER_CONTAINER}' container running spec.image."
    )


class ReplicaSpecs(CamelModel):
    ps: ReplicaSpec | None = Field(None, description="Parameter servers holding the shared variables.")
    worker: ReplicaSpec = Field(description="Workers: each runs PPO on its own batch of environments.")
    evaluator: ReplicaSpec | None = Field(
        None, description="Optional evaluator: runs the latest policy deterministically from checkpoints."
    )

    def counts(self) -> dict[str, int]:
        """Replica count per type, 0 for absent types."""
        return {t: (getattr(self, t).replicas if getattr(self, t) else 0) for t in naming.REPLICA_TYPES}

    def items(self) -> list[tuple[str, ReplicaSpec]]:
        """(type, spec) of the types present, in REPLICA_TYPES order."""
        return [(t, getattr(self, t)) for t in naming.REPLICA_TYPES if getattr(self, t) is not None]


def _overrides_model() -> type[BaseModel]:
    """`spec.trainer`: a preset name plus every TrainerConfig field as an optional override."""
    fields: dict[str, Any] = {
        "preset": (
            str,
            Field(
                "pendulum",
                min_length=1,
                max_length=63,
                pattern=r"^[a-z0-9_]+$",
                description=f"Named trainer preset ({', '.join(presets.names())}).",
            ),
        )
    }
    for name, info in TrainerConfig.model_fields.items():
        # Unset means "keep the preset's value". Only fields that TrainerConfig itself allows to be null
        # (max_grad_norm: null disables clipping) accept an explicit null.
        inner = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        fields[name] = (inner, Field(None, description=info.description))
    model = create_model(
        "TrainerSpec",
        __base__=CamelModel,
        __doc__="Trainer preset and hyperparameter overrides; unset fields keep the preset's value.",
        **fields,
    )
    return model


TrainerSpec = _overrides_model()


class SchedulingPolicy(CamelModel):
    scheduler_name: str | None = Field(None, max_length=253, description="Scheduler for every pod.")
    priority_class: str | None = Field(None, max_length=253, description="PriorityClass of every pod.")
    queue: str | None = Field(None, max_length=63, description="Queue name (Kueue / Volcano label).")
    min_available: int | None = Field(
        None, ge=1, le=3 * naming.MAX_REPLICAS, description="Gang size for gang schedulers."
    )


class RunPolicy(CamelModel):
    clean_pod_policy: CleanPodPolicy = Field(
        "Running",
        description="Pods deleted when the job finishes. Running: the ps and any still-running pods "
        "(finished pods and their logs stay). All: every pod. None: nothing.",
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=31_536_000, description="Delete the finished job this many seconds after it ends."
    )
    active_deadline_seconds: int | None = Field(
        None, ge=1, le=31_536_000, description="Fail the job (DeadlineExceeded) when it runs longer than this."
    )
    backoff_limit: int = Field(3, ge=0, le=10_000, description="Pod restarts allowed across the whole job.")
    suspend: bool = Field(False, description="true deletes the pods and keeps status; false recreates them.")
    scheduling_policy: SchedulingPolicy | None = Field(None, description="Gang scheduling and priority.")


class EmptyDirVolume(CamelModel):
    medium: Literal["", "Memory"] = Field("", description="'' (node disk) or Memory.")
    size_limit: str | None = Field(None, max_length=32, description="Quantity, e.g. 10Gi.")


class ClaimVolume(CamelModel):
    claim_name: str = Field(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class Storage(CamelModel):
    path: str = Field(
        "/var/run/agents",
        pattern=STORAGE_PATH,
        max_length=512,
        description="Mount path inside every pod; the run directory is <path>/<job name>. Absolute, not '/', "
        "no empty, '.' or '..' segment, no whitespace.",
    )
    persistent_volume_claim: ClaimVolume | None = Field(
        None, description="Keep the run directory on this claim (ReadWriteMany for several pods)."
    )
    empty_dir: EmptyDirVolume | None = Field(
        None, description="Scratch volume per pod (the default): lost with the pod."
    )


class TensorBoard(CamelModel):
    enabled: bool = Field(False, description="Run a TensorBoard for this job and publish its URL in status.")
    image: str | None = Field(None, max_length=1024, description="TensorBoard image; defaults to spec.image.")


class EnvServer(CamelModel):
    """The env-server container: a sidecar of each worker, or the container of each env-server pod."""

    image: str | None = Field(
        None, max_length=1024, description="Image with the simulator and agents-operator; defaults to spec.image."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="Pull policy of the env-server container."
    )
    resources: dict[str, Any] | None = Field(
        None,
        description="ResourceRequirements of the env-server container (requests, limits), kept as given.",
    )
    env: list[dict[str, Any]] | None = Field(
        None,
        max_length=256,
        description="Extra environment variables of the env-server container (EnvVar objects).",
    )
    restart_policy: RestartPolicy = Field(
        "OnFailure",
        description="remote only: what a failed env-server pod leads to, as for replicas (restarts count "
        "against runPolicy.backoffLimit). Sidecars are restarted by the kubelet.",
    )
    template: PodTemplate | None = Field(
        None,
        description="remote only: pod template of the env-server pods. The container named "
        f"'{naming.ENV_SERVER_CONTAINER}' (or else the first) runs the server; image, resources and env above fill "
        "in what it leaves unset.",
    )


class Environments(CamelModel):
    """Where each worker's environments are simulated."""

    placement: Literal["colocated", "sidecar", "remote"] = Field(
        "colocated",
        description="colocated: subprocesses of the worker. sidecar: an env-server container in each worker "
        "(and evaluator) pod, over localhost. remote: env-server pods <job>-envserver-<i> with a headless "
        "Service each; worker w uses servers w*serversPerWorker ... (w+1)*serversPerWorker-1.",
    )
    mode: Literal["step", "rollout"] = Field(
        "step",
        description="sidecar and remote only. step: one round trip per batched step. rollout: the server "
        "runs the policy for a whole rollout and returns the trajectories (one round trip per rollout; for "
        "slow or far sources).",
    )
    servers_per_worker: int = Field(
        1,
        ge=1,
        le=64,
        description="remote only: env servers per worker; the worker's envsPerWorker are split over them.",
    )
    port: int = Field(
        DEFAULT_ENV_SERVER_PORT,
        ge=1024,
        le=65535,
        description="gRPC port of the env servers; only the job's own pods may reach it.",
    )
    server: EnvServer = Field(default_factory=EnvServer, description=EnvServer.__doc__)

    @property
    def outside(self) -> bool:
        """The environments live in env servers, not in the worker's own subprocesses."""
        return self.placement != "colocated"


class AgentsJobSpec(CamelModel):
    image: str | None = Field(
        None, max_length=1024, description="Image of every replica; defaults to the operator's trainer image."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="Pull policy of the trainer container."
    )
    trainer: TrainerSpec = Field(default_factory=TrainerSpec, description=TrainerSpec.__doc__)  # type: ignore[valid-type]
    replica_specs: ReplicaSpecs = Field(description="Replicas by type: ps, worker, evaluator.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Lifecycle: cleanup, limits, suspend.")
    success_policy: SuccessPolicy = Field(
        "ChiefWorker", description="ChiefWorker: the job succeeds when worker 0 does. AllWorkers: when all do."
    )
    storage: Storage = Field(default_factory=Storage, description="Where the run directory lives.")
    tensorboard: TensorBoard = Field(default_factory=TensorBoard, description="Optional TensorBoard.")
    environments: Environments = Field(
        default_factory=Environments, description="Where the environments run: colocated, sidecar or remote."
    )

    pod_security: podsecurity.PodSecurity = Field(
        podsecurity.RESTRICTED,
        description="Restricted: every pod the operator creates meets Pod Security Standard 'restricted'; "
        "templates that would break it are refused. Privileged: templates may escalate (privileged, host "
        "namespaces, hostPath, ...); the operator runs such a job only when started with "
        "--allow-privileged-jobs (chart value podSecurity.allowPrivilegedJobs), else the job fails with "
        "reason PrivilegedNotAllowed and no pods are created.",
    )

    def restart_policy(self, replica_type: str) -> RestartPolicy:
        """Restart policy of the pods of any child type, env servers included."""
        if replica_type == naming.ENV_SERVER:
            return self.environments.server.restart_policy
        return getattr(self.replica_specs, replica_type).restart_policy


# --- status ----------------------------------------------------------------------------------------------


class Condition(CamelModel):
    type: ConditionType = Field(
        description=f"{', '.join(CONDITION_TYPES[:-1])}, or {REPLICA_FAILURE} (the API server refuses to create "
        "a child, or a pod cannot start: its message says why)."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds now.")
    reason: str | None = Field(None, max_length=1024, description="CamelCase cause, e.g. BackoffLimitExceeded.")
    message: str | None = Field(None, max_length=32768, description="The cause in a sentence.")
    last_transition_time: str | None = Field(None, description="When status last changed (RFC 3339).")


class ReplicaStatus(CamelModel):
    active: int = Field(0, ge=0, description="Pods pending or running.")
    succeeded: int = Field(0, ge=0, description="Pods that exited 0.")
    failed: int = Field(0, ge=0, description="Pods that failed.")


class Progress(CamelModel):
    global_step: int | None = Field(None, description="Updates applied to the shared parameters.")
    env_steps: int | None = Field(None, description="Environment steps taken by all workers.")
    mean_return: float | None = Field(None, description="Mean return of recent training episodes.")
    steps_per_second: float | None = Field(None, description="Environment steps per second, whole job.")
    updated_at: str | None = Field(None, description="When the chief's metrics were read.")


class ExportStatus(CamelModel):
    path: str = Field(
        description="Directory of the exported policy (a TensorFlow SavedModel and policy.json) on the claim: "
        "<storage.path>/<job name>/exported."
    )
    claim_name: str = Field(description="The PersistentVolumeClaim (spec.storage) that holds it.")


class AgentsJobStatus(CamelModel):
    state: ConditionType | None = Field(None, description="The latest condition that is True.")
    conditions: list[Condition] = Field(default_factory=list, description="The job's lifecycle, one entry per type.")
    replica_statuses: dict[str, ReplicaStatus] = Field(
        default_factory=dict, description="Pod counts by replica type (ps, worker, evaluator)."
    )
    start_time: str | None = Field(None, description="When the operator first reconciled the job (RFC 3339).")
    completion_time: str | None = Field(None, description="When the job succeeded or failed (RFC 3339).")
    observed_generation: int | None = Field(None, description="The metadata.generation this status describes.")
    restarts: int = Field(0, ge=0, description="Pods replaced, counted against backoffLimit.")
    progress: Progress | None = Field(None, description="Training progress read from the chief's /metrics.")
    tensorboard_url: str | None = Field(
        None, alias="tensorboardURL", description="In-cluster URL of the job's TensorBoard, when enabled."
    )
    export: ExportStatus | None = Field(
        None,
        description="The final policy the chief exported, set when the job succeeded with spec.trainer.export "
        "on (the default) and the run directory on a claim (with emptyDir it is lost with the chief's pod).",
    )


# --- the object ------------------------------------------------------------------------------------------


class ObjectMeta(KubeModel):
    name: str = Field(description="Job name; prefix of every child name.")
    namespace: str | None = Field(None, max_length=naming.DNS_LABEL_MAX, pattern=naming.DNS_1123_LABEL)
    uid: str | None = None
    generation: int | None = None
    labels: dict[QualifiedName, LabelValue] | None = None
    annotations: dict[QualifiedName, str] | None = None

    @field_validator("labels", "annotations", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        """A null entry is the empty string, as the API server decodes it into Go's map[string]string."""
        if isinstance(value, dict):
            return {key: "" if item is None else item for key, item in value.items()}
        return value


class AgentsJob(CamelModel):
    api_version: Literal["agents.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["AgentsJob"]
    metadata: ObjectMeta
    spec: AgentsJobSpec
    status: AgentsJobStatus | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    _config: TrainerConfig | None = PrivateAttr(None)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def config(self) -> TrainerConfig:
        """The trainer config the job runs: its preset with its overrides, as `parse_job` resolved them."""
        if self._config is None:
            raise ValueError(f"AgentsJob {self.name} was not parsed with api.parse_job: its trainer is unresolved")
        return self._config

    @property
    def overrides(self) -> dict[str, Any]:
        """The trainer settings the job sets over its preset (snake_case names)."""
        return self.spec.trainer.model_dump(exclude={"preset"}, exclude_unset=True)

    @property
    def topology(self) -> Topology:
        """Who is who among the job's pods: see `topology`."""
        environments = self.spec.environments
        return Topology(
            job=self.name,
            namespace=self.namespace,
            counts=self.spec.replica_specs.counts(),
            placement=environments.placement,
            servers_per_worker=environments.servers_per_worker,
            env_port=environments.port,
            config=self.config,
        )


# --- rules that span fields: CEL in the CRD, Python here -------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A validation rule the schema's bounds cannot express.

    `at` is where the rule hangs in the schema (a path of property names from the root; CEL's `self` is
    the object there), `cel` its CEL expression (with `oldSelf` it is a transition rule, checked on
    updates only), `field` the path reported with the error, and `check(new, old)` the same rule in Python
    over plain dicts as they appear in the manifest, the agreement of both being tested.
    """

    at: tuple[str, ...]
    cel: str
    message: str
    field: str
    check: Callable[[dict, dict | None], bool]

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.cel


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


_NAME_RE = re.compile(naming.DNS_1035_LABEL)


METRICS_PORT_MESSAGE = (
    f"trainer.metricsPort must differ from the TensorFlow port {tfconfig.DEFAULT_PORT} and, with env servers, "
    "from environments.port: the NetworkPolicy opens the metrics port to every source"
)


def metrics_port_free(metrics_port: int, placement: str, env_port: int) -> bool:
    """The metrics port collides with no port of the job's pods (0 disables /metrics)."""
    if metrics_port == 0:
        return True
    return metrics_port != tfconfig.DEFAULT_PORT and (placement == "colocated" or metrics_port != env_port)


def _replica_counts(replica_specs: dict) -> tuple:
    return tuple(_get(replica_specs, t, "replicas") if t in replica_specs else 0 for t in naming.REPLICA_TYPES)


RULES: tuple[Rule, ...] = (
    Rule(
        at=("metadata", "name"),
        cel=f"self.matches('{naming.DNS_1035_LABEL}')",
        message="metadata.name must be a DNS-1035 label: lowercase letters, digits and '-', starting with a "
        "letter (it starts the name of every pod and Service of the job)",
        field="metadata.name",
        check=lambda new, _: bool(_NAME_RE.fullmatch(str(_get(new, "metadata", "name") or ""))),
    ),
    Rule(
        at=("metadata", "name"),
        cel=f"size(self) <= {naming.MAX_JOB_NAME_LENGTH}",
        message=f"metadata.name must be at most {naming.MAX_JOB_NAME_LENGTH} characters so that every child "
        f"name (e.g. <name>-evaluator-{naming.MAX_REPLICAS - 1}) is a valid DNS label",
        field="metadata.name",
        check=lambda new, _: len(str(_get(new, "metadata", "name") or "")) <= naming.MAX_JOB_NAME_LENGTH,
    ),
    Rule(
        at=("spec", "replicaSpecs"),
        cel="self.worker.replicas <= 1 || has(self.ps)",
        message="replicaSpecs.ps is required when there is more than one worker (workers share parameters "
        "through the ps)",
        field="spec.replicaSpecs.ps",
        check=lambda new, _: (
            (_get(new, "spec", "replicaSpecs", "worker", "replicas") or 1) <= 1
            or _get(new, "spec", "replicaSpecs", "ps") is not None
        ),
    ),
    Rule(
        at=("spec", "replicaSpecs"),
        cel="!has(self.evaluator) || self.evaluator.replicas == 1",
        message="replicaSpecs.evaluator.replicas must be 1",
        field="spec.replicaSpecs.evaluator.replicas",
        check=lambda new, _: (
            _get(new, "spec", "replicaSpecs", "evaluator") is None
            or _get(new, "spec", "replicaSpecs", "evaluator", "replicas") in (None, 1)
        ),
    ),
    Rule(
        at=("spec", "storage"),
        cel="!(has(self.persistentVolumeClaim) && has(self.emptyDir))",
        message="storage: set persistentVolumeClaim or emptyDir, not both",
        field="spec.storage",
        check=lambda new, _: (
            not (
                _get(new, "spec", "storage", "persistentVolumeClaim") is not None
                and _get(new, "spec", "storage", "emptyDir") is not None
            )
        ),
    ),
    Rule(
        at=("spec",),
        cel="!self.tensorboard.enabled || has(self.storage.persistentVolumeClaim)",
        message="tensorboard.enabled needs storage.persistentVolumeClaim: TensorBoard runs in its own pod and "
        "reads the run directory from the shared claim",
        field="spec.tensorboard.enabled",
        check=lambda new, _: (
            not _get(new, "spec", "tensorboard", "enabled")
            or _get(new, "spec", "storage", "persistentVolumeClaim") is not None
        ),
    ),
    Rule(
        at=("spec",),
        cel="!has(self.replicaSpecs.evaluator) || has(self.storage.persistentVolumeClaim)",
        message="replicaSpecs.evaluator needs storage.persistentVolumeClaim: the evaluator reads the chief's "
        "checkpoints from the shared claim",
        field="spec.replicaSpecs.evaluator",
        check=lambda new, _: (
            _get(new, "spec", "replicaSpecs", "evaluator") is None
            or _get(new, "spec", "storage", "persistentVolumeClaim") is not None
        ),
    ),
    Rule(
        at=("spec", "replicaSpecs"),
        cel="(has(self.ps) ? self.ps.replicas : 0) == (has(oldSelf.ps) ? oldSelf.ps.replicas : 0) && "
        "self.worker.replicas == oldSelf.worker.replicas && "
        "(has(self.evaluator) ? self.evaluator.replicas : 0) == "
        "(has(oldSelf.evaluator) ? oldSelf.evaluator.replicas : 0)",
        message="replica counts are immutable: every pod's TF_CONFIG lists the whole cluster",
        field="spec.replicaSpecs",
        check=lambda new, old: (
            old is None
            or _replica_counts(_get(new, "spec", "replicaSpecs") or {})
            == _replica_counts(_get(old, "spec", "replicaSpecs") or {})
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel="self.placement == 'remote' || self.serversPerWorker == 1",
        message="environments.serversPerWorker applies to placement remote only (a sidecar is one server per pod)",
        field="spec.environments.serversPerWorker",
        check=lambda new, _: (
            _get(new, "spec", "environments", "placement") == "remote"
            or _get(new, "spec", "environments", "serversPerWorker") in (None, 1)
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel="self.placement == 'remote' || !has(self.server.template)",
        message="environments.server.template applies to placement remote only (the pods of the env servers)",
        field="spec.environments.server.template",
        check=lambda new, _: (
            _get(new, "spec", "environments", "placement") == "remote"
            or _get(new, "spec", "environments", "server", "template") is None
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel=f"self.port != {tfconfig.DEFAULT_PORT}",
        message=f"environments.port must differ from the TensorFlow port {tfconfig.DEFAULT_PORT}",
        field="spec.environments.port",
        check=lambda new, _: _get(new, "spec", "environments", "port") != tfconfig.DEFAULT_PORT,
    ),
    Rule(
        at=("spec",),
        cel=f"!has(self.trainer.metricsPort) || self.trainer.metricsPort != {tfconfig.DEFAULT_PORT} && "
        "(self.environments.placement == 'colocated' || self.trainer.metricsPort != self.environments.port)",
        message=METRICS_PORT_MESSAGE,
        field="spec.trainer.metricsPort",
        check=lambda new, _: (
            _get(new, "spec", "trainer", "metricsPort") is None
            or metrics_port_free(
                _get(new, "spec", "trainer", "metricsPort"),
                _get(new, "spec", "environments", "placement") or "colocated",
                _get(new, "spec", "environments", "port") or DEFAULT_ENV_SERVER_PORT,
            )
        ),
    ),
    Rule(
        at=("spec",),
        cel="self.environments.placement != 'remote' || self.replicaSpecs.worker.replicas * "
        f"self.environments.serversPerWorker + (has(self.replicaSpecs.evaluator) ? 1 : 0) <= {naming.MAX_REPLICAS}",
        message=f"placement remote makes workers x serversPerWorker env servers (+1 for the evaluator); at most "
        f"{naming.MAX_REPLICAS}",
        field="spec.environments.serversPerWorker",
        check=lambda new, _: (
            _get(new, "spec", "environments", "placement") != "remote"
            or env_server_count(
                _get(new, "spec", "replicaSpecs", "worker", "replicas") or 1,
                _get(new, "spec", "environments", "serversPerWorker") or 1,
                _get(new, "spec", "replicaSpecs", "evaluator") is not None,
            )
            <= naming.MAX_REPLICAS
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel="self == oldSelf",
        message="environments is immutable: every worker's command names its env servers",
        field="spec.environments",
        check=lambda new, old: old is None or _get(new, "spec", "environments") == _get(old, "spec", "environments"),
    ),
    Rule(
        at=("spec", "trainer"),
        cel="self == oldSelf",
        message="trainer is immutable: the run directory's config.yaml must match its checkpoints",
        field="spec.trainer",
        check=lambda new, old: old is None or _get(new, "spec", "trainer") == _get(old, "spec", "trainer"),
    ),
    Rule(
        at=("spec", "storage"),
        cel="self == oldSelf",
        message="storage is immutable: the run directory cannot move under a running job",
        field="spec.storage",
        check=lambda new, old: old is None or _get(new, "spec", "storage") == _get(old, "spec", "storage"),
    ),
    Rule(
        at=("spec", "successPolicy"),
        cel="self == oldSelf",
        message="successPolicy is immutable",
        field="spec.successPolicy",
        check=lambda new, old: old is None or _get(new, "spec", "successPolicy") == _get(old, "spec", "successPolicy"),
    ),
)


TEMPLATES = (
    "spec.replicaSpecs.ps.template",
    "spec.replicaSpecs.worker.template",
    "spec.replicaSpecs.evaluator.template",
    "spec.environments.server.template",
)
"""The field path of every pod template of a job."""


def _restricted_rule(template: str, check: podsecurity.Check) -> Rule:
    """`check` on one template, unless the job says podSecurity Privileged. Hung at `spec`, where CEL sees
    both the template and spec.podSecurity."""
    path = template.split(".")
    present = " && ".join(f"has(self.{'.'.join(path[1:n])})" for n in range(3, len(path) + 1))
    pod_spec = "self." + ".".join(path[1:]) + ".spec"
    field = f"{template}.spec.{check.field}"

    def holds(new: dict, _: dict | None) -> bool:
        if _get(new, "spec", "podSecurity") == podsecurity.PRIVILEGED:
            return True
        spec = _get(new, *path, "spec")
        return not isinstance(spec, dict) or check.check(spec)

    return Rule(
        at=("spec",),
        cel=f"self.podSecurity == '{podsecurity.PRIVILEGED}' || !({present}) || ({check.cel.replace('{s}', pod_spec)})",
        message=f"{check.message} under spec.podSecurity Restricted (Pod Security Standard restricted)",
        field=field,
        check=holds,
    )


RULES += tuple(_restricted_rule(template, check) for template in TEMPLATES for check in podsecurity.CHECKS)


# --- parsing with errors a person can act on -------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One reason a manifest is invalid: where (a field path) and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


class InvalidJob(ValueError):
    """The manifest is not a valid AgentsJob; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _object_meta_style(loc: tuple, reason: str) -> tuple[tuple, str]:
    """A dict's key is marked '[key]' by pydantic: say "key:" instead. The job's own labels and annotations
    are named as the API server names them, the map with the entry's key in the reason."""
    if loc[-1:] == ("[key]",):
        loc, reason = loc[:-1], f"key: {reason}"
    if len(loc) > 2 and loc[0] == "metadata" and loc[1] in ("labels", "annotations"):
        loc, reason = loc[:2], f"{loc[2]!r}: {reason}"
    return loc, reason


def _pydantic_problems(err: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            reason = "unknown field"
        elif e["type"] == "literal_error":
            reason = f"must be one of {e['ctx']['expected']}" if "ctx" in e else reason
        loc, reason = _object_meta_style(loc, reason)
        path = _loc(loc)
        problems.append(Problem(f"{prefix}.{path}" if prefix and path else prefix or path, reason))
    return problems


def check_rules(new: dict, old: dict | None = None) -> list[Problem]:
    """Problems from RULES (transition rules only when `old` is given)."""
    problems = []
    for rule in RULES:
        if rule.transition and old is None:
            continue
        if not rule.check(new, old):
            problems.append(Problem(rule.field, rule.message))
    return problems


def parse_job(data: Any, old: dict | None = None) -> AgentsJob:
    """Validate a manifest (a dict as loaded from YAML) completely, or raise InvalidJob naming every problem.

    Beyond the CRD's schema and CEL rules this resolves the trainer preset and its overrides, which the CRD
    cannot check (presets live in the trainer image).
    """
    if not isinstance(data, dict):
        raise InvalidJob([Problem("", f"expected a mapping (an AgentsJob object), got {type(data).__name__}")])
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if kind != naming.KIND or api_version != naming.API_VERSION:
        raise InvalidJob(
            [
                Problem(
                    "kind" if kind != naming.KIND else "apiVersion",
                    f"expected apiVersion {naming.API_VERSION} and kind {naming.KIND}, got {api_version!r} {kind!r}",
                )
            ]
        )
    not_json = _json_problems(data)
    if not_json:
        raise InvalidJob(not_json)
    data = _json_numbers(data)
    try:
        job = AgentsJob.model_validate(data, strict=True)
    except ValidationError as err:
        raise InvalidJob(_pydantic_problems(err)) from None
    problems = check_rules(data, old)
    try:
        job._config = presets.resolve(job.spec.trainer.preset, job.overrides)
    except KeyError as err:
        problems.append(Problem("spec.trainer.preset", str(err.args[0])))
    except ValidationError as err:
        problems += _trainer_problems(err)
    else:
        problems += _environment_problems(job, job.config)
    if problems:
        raise InvalidJob(problems)
    return job


def _json_problems(value: Any, loc: tuple = ()) -> list[Problem]:
    """Values YAML can write but JSON cannot carry (.inf, .nan, !!binary, !!set), anywhere in the manifest,
    pod templates included: kubectl cannot send them, so no API server ever accepts them."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [Problem(_loc(loc), "not a finite number: JSON has no inf or NaN")]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _json_problems(item, (*loc, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _json_problems(item, (*loc, index))]
    if isinstance(value, (bytes, set)):
        return [Problem(_loc(loc), f"YAML's {type(value).__name__} has no JSON form")]
    return []


def _json_numbers(value: Any) -> Any:
    """`value` with every integral float as an int: JSON has one number type, and the API server reads
    `replicas: 2.0` as the integer 2, so validate does too (types stay strict otherwise)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _json_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_numbers(item) for item in value]
    return value


def _environment_problems(job: AgentsJob, config: TrainerConfig) -> list[Problem]:
    """Rules between spec.environments and the resolved trainer config (the CRD cannot see presets)."""
    environments = job.spec.environments
    problems = []
    # An explicit metricsPort is judged by its RULE (and the CRD); a preset's is judged here.
    preset_port = "metrics_port" not in job.spec.trainer.model_fields_set
    if preset_port and not metrics_port_free(config.metrics_port, environments.placement, environments.port):
        reason = f"the preset's {config.metrics_port}: {METRICS_PORT_MESSAGE}"
        problems.append(Problem("spec.trainer.metricsPort", reason))
    if environments.servers_per_worker > config.envs_per_worker:
        problems.append(
            Problem(
                "spec.environments.serversPerWorker",
                f"{environments.servers_per_worker} servers cannot split envsPerWorker {config.envs_per_worker}",
            )
        )
    return problems


def _trainer_problems(err: ValidationError) -> list[Problem]:
    problems = []
    for p in _pydantic_problems(err):
        name = p.field.split(".")[0].split("[")[0]
        field = p.field.replace(name, camel_name(name), 1) if name in TrainerConfig.model_fields else p.field
        problems.append(Problem(f"spec.trainer.{field}" if field else "spec.trainer", p.reason))
    return problems
