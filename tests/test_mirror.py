"""tests/ mirrors agents_operator/: a module's tests are found by its name, at the same sub-path.

- `agents_operator/<dirs>/<name>.py` has its tests in `tests/<dirs>/test_<name>.py` (`trainer/ppo/losses.py`:
  `tests/trainer/ppo/test_losses.py`; `controller.py`: `tests/test_controller.py`). Module names repeat across
  packages (`api.rules` and `reconcile.rules`, `envs.batch` and `sampling.batch`), hence the whole path.
- A package's `__init__.py` with code of its own has them in `tests/<dirs>/<package>/test_init.py`, beside the
  tests of the package's modules. One that only re-exports (or is a docstring) is in `EXEMPT`, and so is
  `__main__.py`; this test checks that an exempt `__init__.py` holds no code.
- `benchmarks/bench_<name>.py` has its tests, where it has any, in `tests/test_<name>.py`.
- Every other test file is a cross-cutting suite (`SUITES`) or file (`CROSS_CUTTING`), each with why: no test
  file's name promises a module it does not test.

Test directories are packages (`__init__.py`): pytest's default import mode needs it for test files of the
same name in different directories.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agents_operator"
BENCHMARKS = ROOT / "benchmarks"
TESTS = ROOT / "tests"

EXEMPT = {
    "__main__.py": "`python -m agents_operator` is `cli.main` (tests/test_cli.py runs the console script)",
    "__init__.py": "the package's version, nothing else",
    "api/__init__.py": "re-exports the api package's models, rules and parse_job",
    "local/__init__.py": "re-exports the local launcher's names",
    "reconcile/__init__.py": "re-exports the plan and its actions",
    "render/__init__.py": "re-exports the render functions",
    "trainer/envs/__init__.py": "a docstring (it re-exports nothing: a worker process loads only what it runs)",
    "trainer/envserver/__init__.py": "a docstring",
    "trainer/ppo/__init__.py": "a docstring",
    "trainer/sampling/__init__.py": "a docstring",
}
"""Modules (under agents_operator/) without a test file of their own, and why."""

SUITES = {
    "e2e": "the operator on a real API server (`make e2e`)",
    "node": "AgentsJobs on the pods of a real node (`make e2e-node`)",
    "ship": "what ships: the chart, deploy/, the Dockerfile and images, Argo CD's health check",
    "distributed": "whole jobs of the real trainer over processes: TensorFlow clusters, the local launcher",
}
"""Directories of tests/ whose tests span the package, and what they run."""

CROSS_CUTTING = {
    "test_audit.py": "`make audit` (tools/audit.py) over every lock",
    "test_benchmarks.py": "benchmarks/ as a whole: every script named bench_*, no private names of the package",
    "test_docs.py": "docs/ against the code: the commands, links and tables they name",
    "test_extras.py": "the install split: what each command imports without the trainer extra",
    "test_fuzz.py": "generated hostile manifests and YAML through validate and render",
    "test_layering.py": "the import graph of the whole package: layers, no cycles, no TensorFlow where none belongs",
    "test_locks.py": "locks/ against pyproject.toml",
    "test_mirror.py": "this layout of tests/",
    "test_properties.py": "generated manifests: the CRD's CEL and its Python twins agree, render works on what passes",
    "test_purity.py": "every module that says it is pure imports no kopf, Kubernetes client or TensorFlow",
    "test_structure.py": "the size of every module and function of the package",
    "local/test_confinement.py": "`agents-operator local` as a whole: kept to this machine and to its lifetime",
    "local/test_parity.py": "one lifecycle, two executors: the operator's plan and the local launcher agree",
}
"""Test files (under tests/) named after what they check across modules, and what that is."""


def _modules() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py"))


def mirrored(module: str) -> str:
    """The test file of a module of agents_operator/ (a path relative to both roots)."""
    path = Path(module)
    if path.name == "__init__.py":
        return str(path.parent / "test_init.py")
    return str(path.parent / f"test_{path.stem}") + ".py"


def _test_files() -> list[str]:
    files = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py"))
    return [f for f in files if Path(f).parts[0] not in SUITES]


def _benchmarked(test_file: str) -> bool:
    """Whether a test file is the tests of a benchmark script: tests/test_<name>.py for bench_<name>.py."""
    path = Path(test_file)
    return path.parent == Path(".") and (BENCHMARKS / f"bench_{path.stem.removeprefix('test_')}.py").is_file()


def _holds_code(source: str) -> list[str]:
    """The statements of a module other than its docstring, imports and `__all__` / `__version__`."""
    found = []
    for index, node in enumerate(ast.parse(source).body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        names = [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
        if docstring or isinstance(node, ast.Import | ast.ImportFrom) or names in (["__all__"], ["__version__"]):
            continue
        found.append(f"line {node.lineno}: {type(node).__name__}")
    return found


def test_every_module_has_its_test_file():
    missing = [
        f"agents_operator/{module}: no tests/{mirrored(module)}"
        for module in _modules()
        if module not in EXEMPT and not (TESTS / mirrored(module)).is_file()
    ]
    assert missing == []


def test_every_test_file_is_named_after_what_it_tests():
    wanted = {mirrored(module) for module in _modules()}
    misnamed = [
        f"tests/{test_file}: names no module at its path, no benchmark, and is not in CROSS_CUTTING"
        for test_file in _test_files()
        if test_file not in wanted and test_file not in CROSS_CUTTING and not _benchmarked(test_file)
    ]
    assert misnamed == []


def test_exempt_modules_exist_and_an_exempt_init_holds_no_code():
    assert [module for module in EXEMPT if not (PACKAGE / module).is_file()] == []
    holding = {
        module: code
        for module in EXEMPT
        if Path(module).name == "__init__.py" and (code := _holds_code((PACKAGE / module).read_text()))
    }
    assert holding == {}, "an __init__.py with code of its own gets a test_init.py, not an exemption"


def test_the_cross_cutting_files_exist_and_name_no_module():
    assert [test_file for test_file in CROSS_CUTTING if not (TESTS / test_file).is_file()] == []
    assert [name for name in SUITES if not (TESTS / name).is_dir()] == []
    wanted = {mirrored(module) for module in _modules()}
    assert [test_file for test_file in CROSS_CUTTING if test_file in wanted or _benchmarked(test_file)] == []


def test_no_test_file_names_both_a_module_and_a_benchmark():
    wanted = {mirrored(module) for module in _modules()}
    assert [test_file for test_file in _test_files() if test_file in wanted and _benchmarked(test_file)] == []


def test_every_reason_is_one_line():
    reasons = {**EXEMPT, **SUITES, **CROSS_CUTTING}
    assert [key for key, why in reasons.items() if not why.strip() or "\n" in why] == []


def test_test_directories_are_packages():
    directories = {(TESTS / test_file).parent for test_file in _test_files()}
    assert sorted(str(d.relative_to(ROOT)) for d in directories if not (d / "__init__.py").is_file()) == []
