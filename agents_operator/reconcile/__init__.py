"""The lifecycle of an AgentsJob as one pure plan, which every executor carries out. Pure package.

| module | holds |
|---|---|
| `actions` | what a plan asks an executor to do (Create, Delete, MarkCounted, WriteStatus, DeleteJob), Events, `Plan` |
| `rules` | restart, success, deadline and failure rules, and the reasons of how a job ends (`Outcome`) |
| `conditions` | what the status's conditions say at each transition, and the Events those post |
| `observe` | what the spec asks for (`Desired`, `DesiredCache`) and what is there, sorted into slots |
| `steps` | `plan` and `refused`: the documented steps, one function each |

Executors: the operator (`kube` executes plans against the API server; `controller` decides when to plan)
and the local launcher (`local`, over processes).
"""

from agents_operator.reconcile.actions import (
    KIND_CONFIG_MAP,
    KIND_DEPLOYMENT,
    KIND_POD,
    KIND_SERVICE,
    Action,
    Create,
    Delete,
    DeleteJob,
    Event,
    MarkCounted,
    Plan,
    Refusal,
    WriteStatus,
    describe_action,
)
from agents_operator.reconcile.observe import Desired, DesiredCache
from agents_operator.reconcile.steps import plan, refused

__all__ = [
    "KIND_CONFIG_MAP",
    "KIND_DEPLOYMENT",
    "KIND_POD",
    "KIND_SERVICE",
    "Action",
    "Create",
    "Delete",
    "DeleteJob",
    "Desired",
    "DesiredCache",
    "Event",
    "MarkCounted",
    "Plan",
    "Refusal",
    "WriteStatus",
    "describe_action",
    "plan",
    "refused",
]
