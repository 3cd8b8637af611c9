"""What a plan asks its executor to do, and what it tells people: actions, Events, the plan itself. Pure module.

An executor runs the actions in order and treats "already done" as done: the operator's `kube` (409 on a
create, 404 on a delete), the local launcher (`local`) over processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents_operator.reconcile.rules import Outcome

KIND_POD, KIND_SERVICE, KIND_DEPLOYMENT = "Pod", "Service", "Deployment"
KIND_CONFIG_MAP = "ConfigMap"


@dataclass(frozen=True)
class Create:
    """Create a child (409 means it exists already: success)."""

    obj: dict

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


@dataclass(frozen=True)
class Delete:
    """Delete a child (404 means it is gone already: success)."""

    kind: str
    name: str
    reason: str
    grace_seconds: int | None = None
    """0 for pods that have already ended (frees the name at once); None: the default grace period."""


@dataclass(frozen=True)
class MarkCounted:
    """Annotate a failed pod with the restart count that includes its failure (before status is written)."""

    pod: str
    restarts: int


@dataclass(frozen=True)
class WriteStatus:
    """Merge-patch the status subresource with these top-level keys (None removes one)."""

    patch: dict


@dataclass(frozen=True)
class DeleteJob:
    reason: str


Action = Create | Delete | MarkCounted | WriteStatus | DeleteJob


def describe_action(action: Action) -> str:
    """One line for the debug log: a large job's plan is thousands of these."""
    match action:
        case Create():
            return f"create {action.kind} {action.name}"
        case Delete(kind=kind, name=name):
            return f"delete {kind} {name}"
        case MarkCounted(pod=pod, restarts=n):
            return f"mark {pod} counted ({n})"
        case WriteStatus(patch=patch):
            return f"write status {sorted(patch)}"
        case _:
            return type(action).__name__


@dataclass(frozen=True)
class Refusal:
    """A child the API server refused to create (admission such as a quota or a policy, or validation)."""

    kind: str
    name: str
    code: int
    """The HTTP status: 403, 422 or 400."""
    message: str
    """The API server's own words (they name the child and the rule)."""


@dataclass(frozen=True)
class Event:
    type: str
    """Normal or Warning."""
    reason: str
    message: str


NORMAL, WARNING = "Normal", "Warning"


@dataclass
class Plan:
    """What to do, in order: markers, status, deletes, creates, job deletion; then post `events`."""

    actions: list[Action]
    status: dict
    """The whole new status (camelCase, as stored)."""
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    """Plan again after this many seconds even if nothing changes (deadline, TTL)."""
    outcome: Outcome | None = None
    """How the job ended, when it ended in this plan."""

    @property
    def status_patch(self) -> dict:
        return next((a.patch for a in self.actions if isinstance(a, WriteStatus)), {})

    def of(self, kind: type) -> list:
        return [a for a in self.actions if isinstance(a, kind)]
