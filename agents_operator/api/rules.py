"""The rules that span fields, which the schema's bounds cannot express: each one CEL for the CRD and its
Python twin over the parsed job, their agreement tested (tests/api/test_rules.py, tests/test_properties.py). Pure
module."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from agents_operator import naming, podsecurity, tfconfig
from agents_operator.api.models import AgentsJob
from agents_operator.api.podtemplate import PodTemplate
from agents_operator.topology import env_server_count


@dataclass(frozen=True)
class Rule:
    """A validation rule of the CRD and of `parse_job`.

    `at` is where the rule hangs in the schema (a path of property names from the root; CEL's `self` is the
    object there), `cel` its CEL expression (with `oldSelf` it is a transition rule, checked on updates
    only), `field` the path reported with the error, and `check(new, old)` the same rule in Python over the
    parsed jobs (defaults applied, as the API server applies them before its CEL rules run).
    """

    at: tuple[str, ...]
    cel: str
    message: str
    field: str
    check: Callable[[AgentsJob, AgentsJob | None], bool]

    @property
    def transition(self) -> bool:
        return "oldSelf" in self.cel


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


def _immutable(section: str, why: str) -> Rule:
    """`spec.<section>` may not change on an update (`self == oldSelf`; its twin compares the parsed sections)."""
    attribute = _attribute(section)
    return Rule(
        at=("spec", section),
        cel="self == oldSelf",
        message=f"{section} is immutable" + (f": {why}" if why else ""),
        field=f"spec.{section}",
        check=lambda new, old: old is None or getattr(new.spec, attribute) == getattr(old.spec, attribute),
    )


def _attribute(name: str) -> str:
    """The model's attribute of a camelCase field name."""
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), name)


def _remote_servers_fit(job: AgentsJob) -> bool:
    environments, replicas = job.spec.environments, job.spec.replica_specs
    if environments.placement != "remote":
        return True
    slots = job.spec.worker_slots
    count = env_server_count(slots, environments.servers_per_worker, replicas.evaluator is not None)
    return count <= naming.MAX_REPLICAS


def _counts_kept(new: AgentsJob, old: AgentsJob) -> bool:
    """The replica counts are those of `old`, but for an elastic job's workers."""
    before, after = old.spec.replica_specs.counts(), new.spec.replica_specs.counts()
    if new.spec.elastic is not None:
        before[naming.WORKER] = after[naming.WORKER]
    return before == after


def _within_bounds(job: AgentsJob) -> bool:
    elastic, workers = job.spec.elastic, job.spec.replica_specs.worker.replicas
    return elastic is None or elastic.min_workers <= workers <= elastic.max_workers


def _metrics_port_fits(job: AgentsJob) -> bool:
    port, environments = job.spec.trainer.metrics_port, job.spec.environments
    return port is None or metrics_port_free(port, environments.placement, environments.port)


RULES: tuple[Rule, ...] = (
    Rule(
        at=("metadata", "name"),
        cel=f"self.matches('{naming.DNS_1035_LABEL}')",
        message="metadata.name must be a DNS-1035 label: lowercase letters, digits and '-', starting with a "
        "letter (it starts the name of every pod and Service of the job)",
        field="metadata.name",
        check=lambda new, _: bool(_NAME_RE.fullmatch(new.metadata.name)),
    ),
    Rule(
        at=("metadata", "name"),
        cel=f"size(self) <= {naming.MAX_JOB_NAME_LENGTH}",
        message=f"metadata.name must be at most {naming.MAX_JOB_NAME_LENGTH} characters so that every child "
        f"name (e.g. <name>-evaluator-{naming.MAX_REPLICAS - 1}) is a valid DNS label",
        field="metadata.name",
        check=lambda new, _: len(new.metadata.name) <= naming.MAX_JOB_NAME_LENGTH,
    ),
    Rule(
        at=("spec", "replicaSpecs"),
        cel="self.worker.replicas <= 1 || has(self.ps)",
        message="replicaSpecs.ps is required when there is more than one worker (workers share parameters "
        "through the ps)",
        field="spec.replicaSpecs.ps",
        check=lambda new, _: new.spec.replica_specs.worker.replicas <= 1 or new.spec.replica_specs.ps is not None,
    ),
    Rule(
        at=("spec", "replicaSpecs"),
        cel="!has(self.evaluator) || self.evaluator.replicas == 1",
        message="replicaSpecs.evaluator.replicas must be 1",
        field="spec.replicaSpecs.evaluator.replicas",
        check=lambda new, _: new.spec.replica_specs.evaluator is None or new.spec.replica_specs.evaluator.replicas == 1,
    ),
    Rule(
        at=("spec", "storage"),
        cel="!(has(self.persistentVolumeClaim) && has(self.emptyDir))",
        message="storage: set persistentVolumeClaim or emptyDir, not both",
        field="spec.storage",
        check=lambda new, _: new.spec.storage.persistent_volume_claim is None or new.spec.storage.empty_dir is None,
    ),
    Rule(
        at=("spec",),
        cel="!self.tensorboard.enabled || has(self.storage.persistentVolumeClaim)",
        message="tensorboard.enabled needs storage.persistentVolumeClaim: TensorBoard runs in its own pod and "
        "reads the run directory from the shared claim",
        field="spec.tensorboard.enabled",
        check=lambda new, _: not new.spec.tensorboard.enabled or new.spec.storage.persistent_volume_claim is not None,
    ),
    Rule(
        at=("spec",),
        cel="!has(self.replicaSpecs.evaluator) || has(self.storage.persistentVolumeClaim)",
        message="replicaSpecs.evaluator needs storage.persistentVolumeClaim: the evaluator reads the chief's "
        "checkpoints from the shared claim",
        field="spec.replicaSpecs.evaluator",
        check=lambda new, _: (
            new.spec.replica_specs.evaluator is None or new.spec.storage.persistent_volume_claim is not None
        ),
    ),
    Rule(
        at=("spec",),
        cel="(has(self.replicaSpecs.ps) ? self.replicaSpecs.ps.replicas : 0) == "
        "(has(oldSelf.replicaSpecs.ps) ? oldSelf.replicaSpecs.ps.replicas : 0) && "
        "(has(self.elastic) || self.replicaSpecs.worker.replicas == oldSelf.replicaSpecs.worker.replicas) && "
        "(has(self.replicaSpecs.evaluator) ? self.replicaSpecs.evaluator.replicas : 0) == "
        "(has(oldSelf.replicaSpecs.evaluator) ? oldSelf.replicaSpecs.evaluator.replicas : 0)",
        message="replica counts are immutable (every pod's TF_CONFIG lists the whole cluster), but for "
        "replicaSpecs.worker.replicas of a job with spec.elastic",
        field="spec.replicaSpecs",
        check=lambda new, old: old is None or _counts_kept(new, old),
    ),
    Rule(
        at=("spec", "elastic"),
        cel="self.minWorkers <= self.maxWorkers",
        message="elastic.minWorkers must be at most elastic.maxWorkers",
        field="spec.elastic.minWorkers",
        check=lambda new, _: new.spec.elastic is None or new.spec.elastic.min_workers <= new.spec.elastic.max_workers,
    ),
    Rule(
        at=("spec",),
        cel="!has(self.elastic) || self.replicaSpecs.worker.replicas >= self.elastic.minWorkers && "
        "self.replicaSpecs.worker.replicas <= self.elastic.maxWorkers",
        message="replicaSpecs.worker.replicas must lie within elastic.minWorkers and elastic.maxWorkers "
        "(a scale outside the job's bounds)",
        field="spec.replicaSpecs.worker.replicas",
        check=lambda new, _: _within_bounds(new),
    ),
    Rule(
        at=("spec",),
        cel="!has(self.elastic) || self.elastic.maxWorkers <= 1 || has(self.replicaSpecs.ps)",
        message="elastic.maxWorkers above 1 needs replicaSpecs.ps (workers share parameters through the ps)",
        field="spec.replicaSpecs.ps",
        check=lambda new, _: (
            new.spec.elastic is None or new.spec.elastic.max_workers <= 1 or new.spec.replica_specs.ps is not None
        ),
    ),
    Rule(
        at=("spec",),
        cel="!has(self.elastic) || !has(self.trainer.backupWorkers) || "
        "self.trainer.backupWorkers < self.elastic.minWorkers",
        message="trainer.backupWorkers must be less than elastic.minWorkers (a sync update is the mean of the "
        "first workers - backupWorkers changes, at every worker count the job may scale to)",
        field="spec.trainer.backupWorkers",
        check=lambda new, _: (
            new.spec.elastic is None or new.overrides.get("backup_workers", 0) < new.spec.elastic.min_workers
        ),
    ),
    Rule(
        at=("spec",),
        cel="!has(self.trainer.backupWorkers) || self.trainer.backupWorkers < self.replicaSpecs.worker.replicas",
        message="trainer.backupWorkers must be less than replicaSpecs.worker.replicas (each sync update is the mean "
        "of the first workers - backupWorkers changes)",
        field="spec.trainer.backupWorkers",
        check=lambda new, _: new.overrides.get("backup_workers", 0) < new.spec.replica_specs.worker.replicas,
    ),
    Rule(
        at=("spec",),
        cel="has(self.elastic) == has(oldSelf.elastic) && (!has(self.elastic) || self.elastic == oldSelf.elastic)",
        message="elastic is immutable: every replica's cluster lists elastic.maxWorkers worker addresses",
        field="spec.elastic",
        check=lambda new, old: old is None or new.spec.elastic == old.spec.elastic,
    ),
    Rule(
        at=("spec", "environments"),
        cel="self.placement == 'remote' || self.serversPerWorker == 1",
        message="environments.serversPerWorker applies to placement remote only (a sidecar is one server per pod)",
        field="spec.environments.serversPerWorker",
        check=lambda new, _: (
            new.spec.environments.placement == "remote" or new.spec.environments.servers_per_worker == 1
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel="self.placement == 'remote' || !has(self.server.template)",
        message="environments.server.template applies to placement remote only (the pods of the env servers)",
        field="spec.environments.server.template",
        check=lambda new, _: (
            new.spec.environments.placement == "remote" or new.spec.environments.server.template is None
        ),
    ),
    Rule(
        at=("spec", "environments"),
        cel=f"self.port != {tfconfig.DEFAULT_PORT}",
        message=f"environments.port must differ from the TensorFlow port {tfconfig.DEFAULT_PORT}",
        field="spec.environments.port",
        check=lambda new, _: new.spec.environments.port != tfconfig.DEFAULT_PORT,
    ),
    Rule(
        at=("spec",),
        cel=f"!has(self.trainer.metricsPort) || self.trainer.metricsPort != {tfconfig.DEFAULT_PORT} && "
        "(self.environments.placement == 'colocated' || self.trainer.metricsPort != self.environments.port)",
        message=METRICS_PORT_MESSAGE,
        field="spec.trainer.metricsPort",
        check=lambda new, _: _metrics_port_fits(new),
    ),
    Rule(
        at=("spec",),
        cel="self.environments.placement != 'remote' || "
        "(has(self.elastic) ? self.elastic.maxWorkers : self.replicaSpecs.worker.replicas) * "
        f"self.environments.serversPerWorker + (has(self.replicaSpecs.evaluator) ? 1 : 0) <= {naming.MAX_REPLICAS}",
        message=f"placement remote makes workers (elastic.maxWorkers when set) x serversPerWorker env servers (+1 "
        f"for the evaluator); at most {naming.MAX_REPLICAS}",
        field="spec.environments.serversPerWorker",
        check=lambda new, _: _remote_servers_fit(new),
    ),
    _immutable("environments", "every worker's command names its env servers"),
    _immutable("trainer", "the run directory's config.yaml must match its checkpoints"),
    _immutable("storage", "the run directory cannot move under a running job"),
    _immutable("successPolicy", ""),
)


TEMPLATES = (
    "spec.replicaSpecs.ps.template",
    "spec.replicaSpecs.worker.template",
    "spec.replicaSpecs.evaluator.template",
    "spec.environments.server.template",
)
"""The field path of every pod template of a job."""


def template(job: AgentsJob, path: str) -> PodTemplate | None:
    """The pod template at one of TEMPLATES, or None where it (or the section holding it) is absent."""
    node: object = job
    for name in path.split("."):
        node = getattr(node, _attribute(name), None)
        if node is None:
            return None
    return node  # type: ignore[return-value]


def _restricted_rule(path: str, check: podsecurity.Check) -> Rule:
    """`check` on one template, unless the job says podSecurity Privileged. Hung at `spec`, where CEL sees
    both the template and spec.podSecurity."""
    parts = path.split(".")
    present = " && ".join(f"has(self.{'.'.join(parts[1:n])})" for n in range(3, len(parts) + 1))
    pod_spec = "self." + ".".join(parts[1:]) + ".spec"

    def holds(new: AgentsJob, _: AgentsJob | None) -> bool:
        if new.spec.pod_security == podsecurity.PRIVILEGED:
            return True
        found = template(new, path)
        return found is None or check.check(found.spec.model_dump(by_alias=True, exclude_unset=True))

    return Rule(
        at=("spec",),
        cel=f"self.podSecurity == '{podsecurity.PRIVILEGED}' || !({present}) || ({check.cel.replace('{s}', pod_spec)})",
        message=f"{check.message} under spec.podSecurity Restricted (Pod Security Standard restricted)",
        field=f"{path}.spec.{check.field}",
        check=holds,
    )


RULES += tuple(_restricted_rule(path, check) for path in TEMPLATES for check in podsecurity.CHECKS)
