"""The house's sizes: no module of agents_operator over MAX_LINES lines, no function over MAX_FUNCTION_LINES
(docstring included), so that each room holds one thing and each step reads on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "agents_operator"
MAX_LINES = 450
MAX_FUNCTION_LINES = 50


def _sources() -> dict[Path, str]:
    return {path: path.read_text() for path in sorted(ROOT.rglob("*.py"))}


def test_no_module_is_longer_than_max_lines():
    long = {str(p.relative_to(ROOT)): n for p, text in _sources().items() if (n := len(text.splitlines())) > MAX_LINES}
    assert long == {}


def test_no_function_is_longer_than_max_function_lines():
    long = {}
    for path, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}
