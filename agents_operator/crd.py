"""The AgentsJob CustomResourceDefinition, generated from the pydantic model and `api.RULES`.

`crds/agentsjob.yaml` is this module's output (`agents-operator crd`); a test fails when they differ.
Pydantic emits JSON Schema 2020-12; the API server wants a structural OpenAPI v3.0 schema: references
inlined, `anyOf [T, null]` as `nullable`, numeric exclusive bounds as booleans, models that keep unknown
fields marked `x-kubernetes-preserve-unknown-fields`. Pure module.
"""

from __future__ import annotations

from typing import Any

from agents_operator import api, naming

_KEEP = (
    "type",
    "format",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "required",
)

_NO_DEFAULT_KEYS = {"default", "nullable", "x-kubernetes-preserve-unknown-fields"}

SCALE = {
    "specReplicasPath": ".spec.replicaSpecs.worker.replicas",
    "statusReplicasPath": ".status.replicaStatuses.worker.active",
    "labelSelectorPath": ".status.workerSelector",
}
"""The scale subresource: `kubectl scale aj/NAME --replicas=N` and an HorizontalPodAutoscaler set the worker count
(refused by the rules unless the job is elastic and N within its bounds)."""

PRINTER_COLUMNS = [
    {"name": "State", "type": "string", "jsonPath": ".status.state", "description": "Latest condition"},
    {
        "name": "Workers",
        "type": "integer",
        "jsonPath": ".status.replicaStatuses.worker.active",
        "description": "Active worker pods",
    },
    {
        "name": "Desired",
        "type": "integer",
        "jsonPath": SCALE["specReplicasPath"],
        "description": "Workers the spec asks for (kubectl scale sets it)",
    },
    {
        "name": "Max",
        "type": "integer",
        "priority": 1,
        "jsonPath": ".spec.elastic.maxWorkers",
        "description": "Most workers an elastic job may scale to",
    },
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.globalStep", "description": "Global step"},
    {
        "name": "Score",
        "type": "number",
        "jsonPath": ".status.progress.meanReturn",
        "description": "Mean training return",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _convert(node: dict, defs: dict, in_spec: bool) -> dict:
    """One JSON Schema node as a structural OpenAPI v3.0 node."""
    extra = {k: node[k] for k in ("description", "default") if k in node}
    if "$ref" in node:
        target = _convert(defs[node["$ref"].split("/")[-1]], defs, in_spec)
        return {**target, **{k: v for k, v in extra.items() if k != "default" or v is not None}}
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        out = _convert(options[0], defs, in_spec)
        out.update({k: v for k, v in extra.items() if v is not None})
        out["nullable"] = True
        return out

    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = node["description"]
    for key in _KEEP:
        if key in node:
            out[key] = node[key]
    if "const" in node:
        out["enum"] = [node["const"]]
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:
            out[flag] = node[bound]
            out[bound] = True
    if node.get("default") is not None:
        out["default"] = node["default"]

    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {k: _convert(v, defs, in_spec) for k, v in node["properties"].items()}
        if in_spec:
            _default_sections(out)
    if node.get("additionalProperties") is True:
        out["type"] = "object"
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(node.get("additionalProperties"), dict):
        out["type"] = "object"
        out["additionalProperties"] = _convert(node["additionalProperties"], defs, in_spec)
    if "items" in node:
        out["items"] = _convert(node["items"], defs, in_spec)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _default_sections(out: dict) -> None:
    """An omitted object section defaults to its own fields' defaults, written out in full, so that stored
    objects show every effective value. Written out rather than `{}`: the API server checks a section's CEL
    rules against its `default` exactly as written, without nested defaults, and a rule that reads
    `self.placement` fails on `{}` ("no such key"), so the CRD would be refused."""
    for name, prop in out["properties"].items():
        optional_section = prop.get("type") == "object" and name not in out.get("required", [])
        if optional_section and not (_NO_DEFAULT_KEYS & set(prop)):
            prop["default"] = _written_defaults(prop)


def _written_defaults(node: dict) -> dict:
    """The value of an object node with every field default filled in (sections converted before their
    parents, so a nested section's default is already complete)."""
    return {name: prop["default"] for name, prop in node.get("properties", {}).items() if "default" in prop}


def _attach_rules(schema: dict) -> None:
    for rule in api.RULES:
        node = schema
        for key in rule.at:
            node = node["properties"][key]
        entry = {"rule": rule.cel, "message": rule.message}
        relative = rule.field.removeprefix(".".join(rule.at)).lstrip(".")
        if relative and rule.at:
            entry["fieldPath"] = "." + relative
        node.setdefault("x-kubernetes-validations", []).append(entry)


def openapi_schema() -> dict:
    """The CRD's openAPIV3Schema for AgentsJob."""
    source = api.AgentsJob.model_json_schema(by_alias=True)
    defs = source.get("$defs", {})
    spec = _convert(source["properties"]["spec"], defs, in_spec=True)
    status = _convert(source["properties"]["status"], defs, in_spec=False)
    status.pop("nullable", None)
    schema = {
        "type": "object",
        "description": "A distributed PPO training job: parameter servers and workers that each simulate a "
        "batch of environments.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # The API server owns metadata; a CRD may only restrict the name, and rules there report it as
            # the field `metadata.name`.
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": spec,
            "status": status,
        },
    }
    _attach_rules(schema)
    return schema


def crd() -> dict:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{naming.PLURAL}.{naming.GROUP}"},
        "spec": {
            "group": naming.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": naming.KIND,
                "listKind": f"{naming.KIND}List",
                "plural": naming.PLURAL,
                "singular": naming.SINGULAR,
                "shortNames": list(naming.SHORT_NAMES),
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": naming.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": SCALE},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
