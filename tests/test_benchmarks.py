"""benchmarks/: every script is a `bench_*.py` (or a helper listed here), and none reaches into a private name
of `agents_operator` (parsed with `ast`, nothing is imported or run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

HELPERS = {
    "local_job_runs.py": "run_job and job_rates, imported by bench_learning_parity, bench_sync_overhead and "
    "bench_worker_scaling",
    "learning_records.py": "the finished runs of bench_learning_table kept in the repository, which it and its "
    "tests read and write",
    "sb3_runner.py": "the Stable-Baselines3 side that bench_sb3_compare runs in its own venv (no torch here)",
}
"""Files in benchmarks/ that are no benchmark of their own, and why each is there."""

KNOWN_PRIVATE: set[tuple[str, str]] = set()
"""(file, use) of private names that benchmarks still need: any other use fails `test_no_private_names`."""

PACKAGE = "agents_operator"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str | None) -> bool:
    return module is not None and (module == PACKAGE or module.startswith(PACKAGE + "."))


def _private_module(module: str) -> list[str]:
    """`module` up to its first private part (`a._b` of `a._b.c`), if it has one."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i, part in enumerate(parts) if _private(part)][:1]


def _root(node: ast.expr) -> ast.expr:
    """The innermost value of an attribute chain or call: `a` of `a.b().c`."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _names_bound(target: ast.expr) -> list[str]:
    """The names an assignment to `target` binds: `a` and `b` of `a, *b`, none of `a.b` or `a[0]`."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _names_bound(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _names_bound(element)]
    return []


def _own_attributes(cls: ast.ClassDef) -> set[str]:
    """What a class defines itself: its methods and class attributes, and what it assigns to `self.x`."""
    own = {node.name for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name) and node in cls.body:
                own.add(target.id)
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                own.add(target.attr)
    return own


def _bindings(node: ast.AST, made_of_ours) -> list[ast.expr]:
    """The targets that `node` assigns something made of an agents_operator name to (or annotates with one)."""
    if isinstance(node, ast.Assign):
        return node.targets if made_of_ours(node.value) else []
    if isinstance(node, ast.AnnAssign):
        return [node.target] if made_of_ours(node.value) or made_of_ours(node.annotation) else []
    if isinstance(node, ast.NamedExpr):
        return [node.target] if made_of_ours(node.value) else []
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return [node.target] if made_of_ours(node.iter) else []
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [node.optional_vars] if made_of_ours(node.context_expr) else []
    return []


def private_uses(source: str) -> list[str]:
    """Every private name of agents_operator that `source` imports or reads, as written there.

    Names bound to an agents_operator import (a module, a class, a function) are followed into what is made of
    them, flow-insensitively: `x = Learner(...)`, `x = module.make()`, a parameter annotated `x: Learner` and
    `for x in module.things()` bind `x` too, so `x._attr` counts as much as `module._name`. `self._attr` and
    dunders are the script's own and do not count, but in a subclass of an agents_operator class, `self._attr`
    that the subclass does not define itself is its base's.
    """
    tree = ast.parse(source)
    bound: set[str] = set()
    uses: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    uses += _private_module(alias.name)
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            uses += _private_module(node.module)
            for alias in node.names:
                if _private(alias.name):
                    uses.append(f"{node.module}.{alias.name}")
                bound.add(alias.asname or alias.name)

    def made_of_ours(value: ast.expr | None) -> bool:
        root = _root(value) if value is not None else None
        return isinstance(root, ast.Name) and root.id in bound

    changed = True
    while changed:  # until no assignment binds another name
        changed = False
        for node in ast.walk(tree):
            names = [name for target in _bindings(node, made_of_ours) for name in _names_bound(target)]
            if isinstance(node, ast.arg) and made_of_ours(node.annotation):
                names.append(node.arg)
            for name in names:
                if name not in bound:
                    bound.add(name)
                    changed = True

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and made_of_ours(node.value):
            uses.append(ast.unparse(node))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and made_of_ours(node.args[0])
        ):
            uses.append(f"{ast.unparse(node.args[0])}.{node.args[1].value}")
        elif isinstance(node, ast.ClassDef) and any(made_of_ours(base) for base in node.bases):
            own = _own_attributes(node)
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                    and _private(inner.attr)
                    and inner.attr not in own
                ):
                    uses.append(f"{node.name}.{inner.attr}")
    return uses


def _scripts() -> list[Path]:
    return sorted(BENCHMARKS.glob("*.py"))


def test_every_benchmark_is_named_bench():
    strays = [p.name for p in _scripts() if not p.name.startswith("bench_") and p.name not in {*HELPERS, "__init__.py"}]
    assert strays == [], "benchmarks are bench_<what it measures>.py; a helper goes in HELPERS, with its reason"


@pytest.mark.parametrize("helper", sorted(HELPERS))
def test_each_helper_exists_and_a_benchmark_uses_it(helper):
    stem = helper.removesuffix(".py")
    assert (BENCHMARKS / helper).exists()
    users = [p.name for p in _scripts() if p.name.startswith("bench_") and re.search(rf"\b{stem}\b", p.read_text())]
    assert users, f"no benchmark imports or runs {helper}"


@pytest.mark.parametrize("script", [p.name for p in _scripts() if p.name.startswith("bench_")])
def test_each_benchmark_runs_only_as_a_script(script):
    """Importing one (the tests do, and so do other benchmarks) measures nothing."""
    tree = ast.parse((BENCHMARKS / script).read_text())
    guards = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    assert guards, f'{script} has no `if __name__ == "__main__":`'


def test_no_private_names():
    found = {(p.name, use) for p in _scripts() for use in private_uses(p.read_text())}
    assert found - KNOWN_PRIVATE == set(), "use a public name, or ask the module's owner to expose one"
    assert KNOWN_PRIVATE - found == set(), "no longer used: take it out of KNOWN_PRIVATE"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from agents_operator.kube import _brief, Kube", ["agents_operator.kube._brief"]),
        ("from agents_operator._secret import thing", ["agents_operator._secret"]),
        ("import agents_operator.trainer._impl as impl", ["agents_operator.trainer._impl"]),
        ("from agents_operator.trainer import learner as m\nm._Local.create()", ["m._Local"]),
        (
            "import agents_operator.trainer.learner\nagents_operator.trainer.learner._x",
            ["agents_operator.trainer.learner._x"],
        ),
        ("from agents_operator.trainer.learner import Learner\nl = Learner()\nl._g.state", ["l._g"]),
        ("from agents_operator.trainer.learner import Learner\ndef f(l: Learner):\n    l.state()._x", ["l.state()._x"]),
        ("from agents_operator import api\nw = api.parse_job({})\nv = w.spec\nv._y", ["v._y"]),
        ("from agents_operator import api\ngetattr(api, '_z')", ["api._z"]),
        (
            "from agents_operator.controller import Controller\nclass C(Controller):\n"
            "    _mine = 1\n    def f(self):\n        self._own = self._mine\n        return self._execute()",
            ["C._execute"],
        ),
        ("import threading\nthreading._shutdown\nclass A:\n    def f(self):\n        self._x = 1", []),
        ("from agents_operator import api\napi.__doc__\nfrom benchmarks import bench_node_job\nbench_node_job._x", []),
    ],
)
def test_what_counts_as_a_private_use(source, expected):
    assert private_uses(source) == expected
