"""What the API server does with the CRD before CEL rules run: schema defaults, then the rules (cel-python)."""

from __future__ import annotations

import copy
from functools import cache

import celpy

from agents_operator import api, crd


def apply_defaults(schema: dict, obj):
    """Fill schema defaults the way the API server does (objects recursively, list items too), after pruning
    the nulls of fields that are not `nullable`, as it does too."""
    if isinstance(obj, dict) and "properties" in schema:
        for name, prop in schema["properties"].items():
            if name in obj and obj[name] is None and not prop.get("nullable"):
                del obj[name]
            if name not in obj and "default" in prop:
                obj[name] = copy.deepcopy(prop["default"])
            if name in obj:
                obj[name] = apply_defaults(prop, obj[name])
    elif isinstance(obj, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in obj]
    return obj


@cache
def _program(expr: str):
    env = celpy.Environment()
    return env.program(env.compile(expr))


def _node(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


@cache
def _schema() -> dict:
    """The CRD's schema, built once: the agreement tests ask for thousands of verdicts (only read, never changed)."""
    return crd.openapi_schema()


def parsed(data: dict) -> api.AgentsJob:
    """The job model of a schema-valid manifest: what a rule's Python twin reads."""
    return api.AgentsJob.model_validate(data, strict=True)


def cel_verdict(rule: api.Rule, new: dict, old: dict | None = None) -> bool | None:
    """The rule's CEL verdict on defaulted objects, or None where the API server would not run it
    (the node is absent, or a transition rule without an old object)."""
    schema = _schema()
    new = apply_defaults(schema, copy.deepcopy(new))
    node = _node(new, rule.at)
    if node is None:
        return None
    activation = {"self": celpy.json_to_cel(node)}
    if rule.transition:
        if old is None:
            return None
        old_node = _node(apply_defaults(schema, copy.deepcopy(old)), rule.at)
        if old_node is None:
            return None
        activation["oldSelf"] = celpy.json_to_cel(old_node)
    result = _program(rule.cel).evaluate(activation)
    return bool(result)
