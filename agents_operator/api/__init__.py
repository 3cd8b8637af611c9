"""The AgentsJob API: one pydantic model for spec and status, and its validation rules.

Everything that checks an AgentsJob comes from here: `crd.py` turns these models and `RULES` into the CRD's
OpenAPI schema and CEL rules (so `kubectl apply` rejects what `agents-operator validate` rejects), the
operator and the local launcher parse manifests with `parse_job`. Pure package:

- `base`: the two kinds of model (ours; Kubernetes objects we only partly model) and shared field types;
- `podtemplate`: the mirror of the Kubernetes pod template;
- `models`: the spec, the status, the object;
- `rules`: the cross-field rules, each CEL for the CRD and its Python twin over the parsed job;
- `parsing`: `parse_job` and its errors.
"""

from agents_operator.api.base import CleanPodPolicy, ConditionType, RestartPolicy, SuccessPolicy
from agents_operator.api.models import (
    AgentsJob,
    AgentsJobSpec,
    AgentsJobStatus,
    Condition,
    Elastic,
    Environments,
    EnvServer,
    ExportStatus,
    Progress,
    ReplicaSpec,
    ReplicaSpecs,
    ReplicaStatus,
    RunPolicy,
    Storage,
    TrainerSpec,
)
from agents_operator.api.parsing import InvalidJob, Problem, check_rules, json_numbers, parse_job
from agents_operator.api.podtemplate import PodTemplate
from agents_operator.api.rules import RULES, TEMPLATES, Rule
from agents_operator.contract import (
    CONDITION_TYPES,
    CREATED,
    FAILED,
    REPLICA_FAILURE,
    RESTARTING,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
)

__all__ = [
    "CONDITION_TYPES",
    "CREATED",
    "FAILED",
    "REPLICA_FAILURE",
    "RESTARTING",
    "RULES",
    "RUNNING",
    "SUCCEEDED",
    "SUSPENDED",
    "TEMPLATES",
    "AgentsJob",
    "AgentsJobSpec",
    "AgentsJobStatus",
    "CleanPodPolicy",
    "Condition",
    "ConditionType",
    "Elastic",
    "EnvServer",
    "Environments",
    "ExportStatus",
    "InvalidJob",
    "PodTemplate",
    "Problem",
    "Progress",
    "ReplicaSpec",
    "ReplicaSpecs",
    "ReplicaStatus",
    "RestartPolicy",
    "Rule",
    "RunPolicy",
    "Storage",
    "SuccessPolicy",
    "TrainerSpec",
    "check_rules",
    "json_numbers",
    "parse_job",
]
