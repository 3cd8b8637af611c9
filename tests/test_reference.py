"""docs/reference.md is generated from the model and kept current."""

import re
from pathlib import Path

from agents_operator import api, crd, reference

ROOT = Path(__file__).resolve().parent.parent


def test_checked_in_reference_is_current():
    checked_in = (ROOT / "docs" / "reference.md").read_text()
    assert checked_in == reference.markdown(), "run `make reference` and commit docs/reference.md"


def _leaves(node: dict, path: str):
    children = node.get("properties") or {}
    if node.get("type") == "array":
        children = {f"[].{k}": v for k, v in (node["items"].get("properties") or {}).items()}
    if not children:
        yield path
    for name, child in children.items():
        yield from _leaves(child, f"{path}{name}" if name.startswith("[]") else f"{path}.{name}")


def test_every_field_of_spec_and_status_has_a_row():
    text = reference.markdown()
    schema = crd.openapi_schema()
    # A type used twice is shown once; its other places get one row that points there.
    shared = re.findall(r"^\| `([^`]+)` \| object \|.*Same fields as `", text, flags=re.M)
    assert "spec.replicaSpecs.worker" in shared and "spec.environments.server.template" in shared
    for part in ("spec", "status"):
        for path in _leaves(schema["properties"][part], part):
            if any(path.startswith(f"{s}.") for s in shared):
                continue
            assert f"| `{path}` |" in text, path


def test_rows_carry_type_default_bounds_and_description():
    text = reference.markdown()
    backoff = api.RunPolicy.model_fields["backoff_limit"].description
    assert f"| `spec.runPolicy.backoffLimit` | integer | `3` | ≥ 0, ≤ 10,000 | {backoff} |" in text
    assert '| `spec.storage.emptyDir.medium` | `""` \\| `Memory` | `""` |' in text
    assert "| `spec.replicaSpecs.worker` | object |  |  | **Required.**" in text
    assert "Same fields as `spec.replicaSpecs.ps`." in text
    for rule in api.RULES:
        assert rule.message in text
