"""The lock files agree with pyproject.toml and are complete enough for `pip install --require-hashes`.

Which extras go into which lock is read from the Makefile's `locks` target, the one place that says it.
"""

import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.locktools import ROOT, pins, recipes

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = canonicalize_name(PROJECT["name"])


def top_level(args: list[str]) -> list[Requirement]:
    """The requirements a recipe names directly: pyproject's dependencies and extras, or a .in file's lines."""
    source = next(arg for arg in args if arg.endswith((".toml", ".in")))
    if source.endswith(".in"):
        lines = (ROOT / source).read_text().splitlines()
        return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    extras = [args[i + 1] for i, arg in enumerate(args) if arg == "--extra"]
    return [*map(Requirement, PROJECT["dependencies"]), *_expand(extras)]


def _expand(extras: list[str]) -> list[Requirement]:
    """The requirements of `extras`, following self-references such as agents-operator[trainer]."""
    out, todo, seen = [], list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in map(Requirement, PROJECT["optional-dependencies"][extra]):
            if canonicalize_name(req.name) == NAME:
                todo.extend(req.extras)
            else:
                out.append(req)
    return out


@pytest.mark.parametrize("lock", sorted(recipes()))
def test_every_top_level_requirement_is_pinned_within_its_range(lock):
    pinned = pins(ROOT / lock)
    for req in top_level(recipes()[lock]):
        name = canonicalize_name(req.name)
        assert name in pinned, f"{lock}: {req} is not pinned (run make locks)"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{lock}: {name}=={pinned[name]} not {req}"


@pytest.mark.parametrize("lock", sorted(recipes()))
def test_locks_hold_dependencies_only(lock):
    """The project itself is installed from the source tree, never from an index."""
    assert NAME not in pins(ROOT / lock)


def test_the_operator_lock_holds_no_learning_stack():
    operator = set(pins(ROOT / "locks" / "operator.txt"))
    trainer = {canonicalize_name(r.name) for r in _expand(["trainer"])}
    assert not operator & (trainer | {"numpy", "keras", "tensorflow"})


def test_the_recipes_cover_every_lock_file():
    assert set(recipes()) == {f"locks/{p.name}" for p in (ROOT / "locks").glob("*.txt")}


def test_a_pin_without_a_hash_is_caught(tmp_path):
    lock = tmp_path / "x.txt"
    lock.write_text("pyyaml==6.0.2 \\\n    --hash=sha256:00\n    # via kopf\nkopf==1.45.2\n")
    with pytest.raises(AssertionError, match="kopf has no hash"):
        pins(lock)
