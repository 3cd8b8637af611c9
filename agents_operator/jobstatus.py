"""The AgentsJob's status as the operator writes it: its conditions, the state they make, and the patch that
writes a new status over the old one. Pure module.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agents_operator.api import AgentsJobStatus, Condition
from agents_operator.contract import CREATED, FAILED, REPLICA_FAILURE, RESTARTING, RUNNING, SUCCEEDED, SUSPENDED

PRECEDENCE = (FAILED, SUCCEEDED, SUSPENDED, RESTARTING, RUNNING, REPLICA_FAILURE, CREATED)
"""When several conditions are True, state is the first of these (terminal ones win; a job whose pods the
API server refuses shows ReplicaFailure until they run, rather than a Created that will not progress)."""

ORDER = (CREATED, REPLICA_FAILURE, RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
"""The order of status.conditions, and of the states the operator counts."""


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def get_condition(status: AgentsJobStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def is_true(status: AgentsJobStatus, type_: str) -> bool:
    cond = get_condition(status, type_)
    return cond is not None and cond.status == "True"


def set_condition(status: AgentsJobStatus, type_: str, value: bool, reason: str, message: str, now: datetime) -> bool:
    """Set one condition in place; True when its status flipped. A False condition is only recorded when the
    condition exists already (conditions appear once they first become True)."""
    wanted = "True" if value else "False"
    cond = get_condition(status, type_)
    if cond is None:
        if not value:
            return False
        status.conditions.append(
            Condition(type=type_, status=wanted, reason=reason, message=message, last_transition_time=timestamp(now))
        )
        status.conditions.sort(key=lambda c: ORDER.index(c.type))
        return True
    flipped = cond.status != wanted
    cond.status = wanted
    cond.reason, cond.message = reason, message
    if flipped:
        cond.last_transition_time = timestamp(now)
    return flipped


def state_of(status: AgentsJobStatus) -> str | None:
    return next((t for t in PRECEDENCE if is_true(status, t)), None)


def finished(status: AgentsJobStatus) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def parse_status(raw: Any) -> AgentsJobStatus:
    """The job's status as stored; anything we cannot read counts as empty (never crash on a bad object)."""
    if not isinstance(raw, Mapping):
        return AgentsJobStatus()
    known = {k: v for k, v in raw.items() if k in _STATUS_KEYS}
    try:
        return AgentsJobStatus.model_validate(known)
    except ValueError:
        return AgentsJobStatus()


_STATUS_KEYS = {f.alias or n for n, f in AgentsJobStatus.model_fields.items()} | set(AgentsJobStatus.model_fields)


def dump_status(status: AgentsJobStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of the top-level status keys that differ (None removes a key)."""
    patch = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch
