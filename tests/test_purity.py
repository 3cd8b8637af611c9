"""The pure core imports no kopf, no Kubernetes client and no TensorFlow."""

import json
import subprocess
import sys

PURE = [
    "api",
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
    "status",
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
