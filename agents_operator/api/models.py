"""The AgentsJob object: its spec, its status, and what a parsed job tells (its trainer config, its topology).
Pure module."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, field_validator

from agents_operator import naming, podsecurity, presets
from agents_operator.api.base import (
    STORAGE_PATH,
    CamelModel,
    CleanPodPolicy,
    ConditionType,
    KubeModel,
    LabelValue,
    QualifiedName,
    RestartPolicy,
    SuccessPolicy,
)
from agents_operator.api.podtemplate import PodTemplate
from agents_operator.config import TrainerConfig
from agents_operator.contract import CONDITION_TYPES, ENV_SERVER_PORT, REPLICA_FAILURE
from agents_operator.topology import Topology

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
        ENV_SERVER_PORT,
        ge=1024,
        le=65535,
        description="gRPC port of the env servers; only the job's own pods may reach it.",
    )
    server: EnvServer = Field(default_factory=EnvServer, description=EnvServer.__doc__)

    @property
    def outside(self) -> bool:
        """The environments live in env servers, not in the worker's own subprocesses."""
        return self.placement != "colocated"


class Elastic(CamelModel):
    """Bounds of a job whose worker count may change while it trains (`kubectl scale`, an HPA): workers
    added start, pull the shared weights and train; workers removed (the highest indices) finish their
    iteration and leave."""

    min_workers: int = Field(1, ge=1, le=naming.MAX_REPLICAS, description="Fewest workers a scale may leave.")
    max_workers: int = Field(
        ge=1,
        le=naming.MAX_REPLICAS,
        description="Most workers a scale may ask for: the cluster every replica starts with lists this many "
        "worker addresses, so it is fixed for the job's life.",
    )


class AgentsJobSpec(CamelModel):
    image: str | None = Field(
        None, max_length=1024, description="Image of every replica; defaults to the operator's trainer image."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="Pull policy of the trainer container."
    )
    trainer: TrainerSpec = Field(default_factory=TrainerSpec, description=TrainerSpec.__doc__)  # type: ignore[valid-type]
    replica_specs: ReplicaSpecs = Field(description="Replicas by type: ps, worker, evaluator.")
    elastic: Elastic | None = Field(
        None,
        description="Lets replicaSpecs.worker.replicas change while the job runs (the scale subresource: "
        "kubectl scale, an HorizontalPodAutoscaler), within these bounds; in sync mode each update aggregates "
        "the changes of the workers there, less trainer.backupWorkers.",
    )
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

    @property
    def worker_slots(self) -> int:
        """How many worker addresses every replica's cluster lists: elastic.maxWorkers, else the workers."""
        return self.elastic.max_workers if self.elastic else self.replica_specs.worker.replicas

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
    workers: int | None = Field(
        None,
        description="The worker count the job's children were last made for (replicaSpecs.worker.replicas): a "
        "change is a scale, said in an Event.",
    )
    worker_selector: str | None = Field(
        None, description="Label selector of the job's worker pods (the scale subresource's, for an HPA)."
    )
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
            worker_slots=self.spec.worker_slots,
            placement=environments.placement,
            servers_per_worker=environments.servers_per_worker,
            env_port=environments.port,
            config=self.config,
        )
