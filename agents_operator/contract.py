"""What the operator, the trainer and the client agree on outside TF_CONFIG (`tfconfig` holds that): the
env servers' port, the names of the chief's progress metrics, and the job's condition types with their lookup
in a status as the API server returns it. Pure module: the trainer, the operator and `client` import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENV_SERVER_PORT = 50051
"""gRPC port of an env server: the CRD's default of spec.environments.port and the server's own."""

# --- the chief's progress metrics ----------------------------------------------------------------------

METRIC_PREFIX = "agents_trainer_"
"""Every trainer metric's name starts so (the trainer's registry)."""
METRIC_GLOBAL_STEP = f"{METRIC_PREFIX}global_step"
METRIC_ENV_STEPS = f"{METRIC_PREFIX}env_steps"
METRIC_ITERATIONS = f"{METRIC_PREFIX}iterations"
METRIC_MEAN_RETURN = f"{METRIC_PREFIX}mean_return"
METRIC_EVAL_RETURN = f"{METRIC_PREFIX}eval_mean_return"
METRIC_STEPS_PER_SECOND = f"{METRIC_PREFIX}env_steps_per_second"

# --- conditions ------------------------------------------------------------------------------------------

CONDITION_TYPES = ("Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "ReplicaFailure")
CREATED, RUNNING, RESTARTING, SUCCEEDED, FAILED, SUSPENDED, REPLICA_FAILURE = CONDITION_TYPES


def find_condition(job_status: Mapping[str, Any] | None, type_: str) -> dict | None:
    """The condition of this type in a job's status (a dict as the API server returns it), if any."""
    return next((c for c in (job_status or {}).get("conditions") or [] if c.get("type") == type_), None)


def condition_true(job_status: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether the job's status holds a condition of this type with status True."""
    condition = find_condition(job_status, type_)
    return condition is not None and condition.get("status") == "True"
