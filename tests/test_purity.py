"""The pure core imports no kopf, no Kubernetes client and no TensorFlow."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "agents_operator"

PURE = [
    "api",
    "api.base",
    "api.podtemplate",
    "api.models",
    "api.rules",
    "api.parsing",
    "contract",
    "podsecurity",
    "naming",
    "tfconfig",
    "topology",
    "launch",
    "render",
    "crd",
    "config",
    "presets",
    "manifests",
    "yamlload",
    "render.common",
    "render.pods",
    "render.envservers",
    "render.children",
    "reference",
    "podview",
    "jobstatus",
    "chiefmetrics",
    "reconcile",
    "exported",
    "reconcile.actions",
    "reconcile.rules",
    "reconcile.conditions",
    "reconcile.observe",
    "reconcile.steps",
]
FORBIDDEN = ["kopf", "kubernetes", "tensorflow", "gymnasium", "pybullet", "aiohttp"]


def test_pure_modules_import_no_io_frameworks():
    code = (
        "import json, sys\n"
        + "".join(f"import agents_operator.{m}\n" for m in PURE)
        + f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_cli_help_is_fast_to_import():
    code = "import sys, agents_operator.cli; print(sorted(m for m in sys.modules if m.startswith('tensorflow')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _says_pure(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return "Pure module" in doc or "Pure package" in doc


def test_every_module_that_says_it_is_pure_is_checked():
    """A docstring's "Pure module." is a promise this file keeps: the module is in PURE."""
    said = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in ROOT.rglob("*.py")
        if "trainer" not in p.parts and _says_pure(p)
    }
    assert said - set(PURE) == set()
