"""The trainer's modules form layers: no import cycle, between modules or between the trainer's packages, and
sampling and the environments import no TensorFlow.

The graph is read from the source with `ast`, so it holds every import a module can make: at module level,
inside functions (an import there to dodge a cycle would hide it from a runtime check) and under
`if TYPE_CHECKING:` (a cycle of annotations is still two modules that each need the other). The TensorFlow
check follows imports that run (not those under TYPE_CHECKING) through every module of the package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "agents_operator"
TRAINER = f"{PACKAGE}.trainer"
# What workers' environment processes and env servers load: never TensorFlow (seconds to import, ~1.3 GB).
TENSORFLOW_FREE = [
    f"{TRAINER}.envs",
    f"{TRAINER}.sampling",
    f"{TRAINER}.envserver",
    f"{TRAINER}.ppo.normalize",
    f"{TRAINER}.ppo.policy",
    f"{TRAINER}.ppo.returns",
]


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imported(node: ast.AST, module: str, path: Path) -> list[str]:
    """The absolute names an import statement imports (for `from X import y`: X.y when that is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    base = ".".join(part for part in (package if node.level else "", node.module or "") if part)
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in _modules() else base for alias in node.names]


@functools.cache
def _imports(module: str, runtime_only: bool) -> frozenset[str]:
    """Every name `module` imports anywhere in its source; with `runtime_only`, not those for type checkers."""
    path = _modules()[module]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if runtime_only and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(_imported(node, module, path))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return frozenset(found)


def _graph(prefix: str, runtime_only: bool) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, for the modules under `prefix`."""
    modules = [m for m in _modules() if m == prefix or m.startswith(prefix + ".")]
    return {m: {i for i in _imports(m, runtime_only) if i in _modules() and i != m} for m in modules}


def _package(module: str) -> str:
    """The package a module belongs to: itself for a package's `__init__`, else the one that holds it."""
    return module if _modules()[module].name == "__init__.py" else module.rpartition(".")[0]


def _package_graph(prefix: str) -> dict[str, set[str]]:
    """Package -> the packages its modules import, for the packages under `prefix` (`prefix` itself being one:
    its own modules, e.g. `agents_operator.trainer.learner`, against those of its sub-packages)."""
    graph: dict[str, set[str]] = {}
    for module, imported in _graph(prefix, runtime_only=False).items():
        targets = {_package(i) for i in imported if i == prefix or i.startswith(prefix + ".")}
        graph.setdefault(_package(module), set()).update(targets - {_package(module)})
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in order, the first repeated last), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target in graph and target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def _tensorflow_route(module: str) -> list[str] | None:
    """A chain of runtime imports from `module` to one that imports TensorFlow, or None."""
    graph = _graph(PACKAGE, runtime_only=True)
    routes = {module: [module]}
    queue = [module]
    while queue:
        current = queue.pop(0)
        if any(name.split(".")[0] == "tensorflow" for name in _imports(current, True)):
            return [*routes[current], "tensorflow"]
        for target in sorted(graph[current] - routes.keys()):
            routes[target] = [*routes[current], target]
            queue.append(target)
    return None


def test_the_trainer_has_no_import_cycle():
    cycle = _cycle(_graph(TRAINER, runtime_only=False))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_trainers_packages_import_one_another_in_layers():
    """Not only modules: the trainer's own modules and each of its sub-packages (envs, envserver, sampling, ppo)
    import one another without a cycle, so each package can be read, tested and loaded above those it uses."""
    graph = _package_graph(TRAINER)
    assert {f"{TRAINER}.envs", f"{TRAINER}.envserver", f"{TRAINER}.sampling", f"{TRAINER}.ppo"} <= graph.keys()
    cycle = _cycle(graph)
    assert cycle is None, "package import cycle: " + " -> ".join(cycle)


OPERATOR_PACKAGES = tuple(
    f"{PACKAGE}.{name}" for name in ("api", "render", "reconcile", "local", "exported", "trainer")
)
"""The sub-packages of agents_operator, each one node of its package graph (the trainer's are checked above)."""


def _operator_node(module: str) -> str:
    return next((p for p in OPERATOR_PACKAGES if module == p or module.startswith(p + ".")), module)


def test_the_operators_packages_and_modules_import_one_another_in_layers():
    """agents_operator's modules and its sub-packages (each taken whole) import one another without a cycle: no
    module of `api`, `render`, `reconcile`, `local`, `exported` or `trainer` imports one that imports it back."""
    graph: dict[str, set[str]] = {}
    for module, imported in _graph(PACKAGE, runtime_only=False).items():
        node = _operator_node(module)
        graph.setdefault(node, set()).update({_operator_node(i) for i in imported} - {node})
    assert set(OPERATOR_PACKAGES) <= graph.keys()
    cycle = _cycle(graph)
    assert cycle is None, "package import cycle: " + " -> ".join(cycle)


def test_agents_operator_has_no_import_cycle():
    cycle = _cycle(_graph(PACKAGE, runtime_only=False))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "module", [m for m in _modules() if any(m == p or m.startswith(p + ".") for p in TENSORFLOW_FREE)]
)
def test_sampling_and_environments_import_no_tensorflow(module):
    route = _tensorflow_route(module)
    assert route is None, " -> ".join(route)


def test_the_checks_see_a_cycle_and_a_route_to_tensorflow():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert _package(f"{TRAINER}.envs") == _package(f"{TRAINER}.envs.batch") == f"{TRAINER}.envs"
    assert _package(f"{TRAINER}.learner") == TRAINER
    assert f"{TRAINER}.envs" in _package_graph(TRAINER)[f"{TRAINER}.sampling"]
    assert _tensorflow_route(f"{TRAINER}.learner") == [f"{TRAINER}.learner", "tensorflow"]


def test_the_graph_holds_function_level_and_type_checking_imports():
    assert f"{TRAINER}.loop" in _imports(f"{TRAINER}.commands", runtime_only=True)  # inside a function
    training_env, batch = f"{TRAINER}.sampling.training_env", f"{TRAINER}.envs.batch"
    assert batch in _imports(training_env, runtime_only=False)  # under TYPE_CHECKING
    assert batch not in _imports(training_env, runtime_only=True)
