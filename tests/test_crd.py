from pathlib import Path

import celpy
import kubernetes_validate
import pytest
import yaml

from agents_operator import api, contract, crd, manifests
from tests.crdtools import apply_defaults

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_KEYS = {
    "type", "format", "description", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "required", "properties", "items",
    "additionalProperties", "default", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
}  # fmt: skip


def test_checked_in_crd_is_generated_from_the_model():
    checked_in = (ROOT / "crds" / "agentsjob.yaml").read_text()
    assert checked_in == manifests.dump(crd.crd()), "run `make crd` and commit crds/agentsjob.yaml"


def test_crd_is_a_valid_customresourcedefinition():
    kubernetes_validate.validate(crd.crd(), "1.37.0", strict=True)


def _nodes(node, path="$"):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    for path, node in _nodes(crd.openapi_schema()):
        assert set(node) <= SCHEMA_KEYS, (path, set(node) - SCHEMA_KEYS)
        assert "type" in node, path
        if node["type"] == "object" and path != "$.metadata":  # the API server owns the root metadata
            assert (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            ), path
        assert not ("properties" in node and isinstance(node.get("additionalProperties"), dict)), path


def test_defaults_are_valid_values():
    minimal = {
        "apiVersion": "agents.dev/v1alpha1",
        "kind": "AgentsJob",
        "metadata": {"name": "d"},
        "spec": {"replicaSpecs": {"worker": {}}},
    }
    defaulted = apply_defaults(crd.openapi_schema(), minimal)
    assert defaulted["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 3, "suspend": False}
    assert defaulted["spec"]["trainer"] == {"preset": "pendulum"}
    assert defaulted["spec"]["replicaSpecs"]["worker"] == {"replicas": 1, "restartPolicy": "OnFailure"}
    assert api.parse_job(defaulted).spec.run_policy.backoff_limit == 3


def _schema_node(schema: dict, path: str) -> dict:
    node = schema
    for key in path.lstrip(".").split("."):
        node = node["properties"][key] if "properties" in node else node["additionalProperties"]
    return node


def test_status_and_scale_subresources_and_printer_columns():
    version = crd.crd()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    assert version["subresources"] == {"status": {}, "scale": crd.SCALE}
    for key, kind in [
        ("specReplicasPath", "integer"),
        ("statusReplicasPath", "integer"),
        ("labelSelectorPath", "string"),
    ]:
        assert _schema_node(schema, crd.SCALE[key])["type"] == kind, key  # paths the model really has
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["State", "Workers", "Desired", "Max", "Step", "Score", "Age"]
    for name, path in columns.items():
        if name == "Age":
            continue
        assert _schema_node(schema, path)["type"] in ("string", "integer", "number"), name


@pytest.mark.parametrize("rule", api.RULES, ids=lambda r: r.cel[:40])
def test_cel_rules_compile(rule):
    env = celpy.Environment()
    env.compile(rule.cel)


def test_crd_yaml_has_no_aliases():
    text = (ROOT / "crds" / "agentsjob.yaml").read_text()
    assert "&id" not in text and "*id" not in text
    assert yaml.safe_load(text)["metadata"]["name"] == "agentsjobs.agents.dev"


def _rules_with_defaults(node, path="$"):
    for sub_path, sub in _nodes(node, path):
        if "default" in sub:
            for rule in sub.get("x-kubernetes-validations", []):
                yield sub_path, sub["default"], rule


def test_every_rule_passes_on_its_sections_default_as_written():
    """The API server checks a section's CEL rules against its `default` as written (without nested
    defaults) when the CRD is created, and refuses the CRD when one fails or reads a missing key."""
    checked = 0
    for path, default, rule in _rules_with_defaults(crd.openapi_schema()):
        if "oldSelf" in rule["rule"]:
            continue  # transition rules never run on a default
        env = celpy.Environment()
        program = env.program(env.compile(rule["rule"]))
        try:
            verdict = program.evaluate({"self": celpy.json_to_cel(default)})
        except celpy.CELEvalError as err:
            pytest.fail(f"{path}: rule {rule['rule']!r} cannot run on default {default}: {err}")
        assert verdict is True or verdict == celpy.celtypes.BoolType(True), (path, rule["rule"], default)
        checked += 1
    assert checked >= 3  # environments has three such rules today


def test_section_defaults_are_written_out_in_full():
    schema = crd.openapi_schema()
    environments = schema["properties"]["spec"]["properties"]["environments"]
    assert environments["default"] == {
        "placement": "colocated",
        "mode": "step",
        "serversPerWorker": 1,
        "port": contract.ENV_SERVER_PORT,
        "server": {"restartPolicy": "OnFailure"},
    }
