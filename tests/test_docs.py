"""The documentation names only commands that exist and links only to files that exist."""

import re
from pathlib import Path

import pytest

from agents_operator import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _commands() -> set[str]:
    parser = cli.build_parser()
    return set(next(a for a in parser._actions if a.dest == "command").choices)


def _mentioned() -> set[str]:
    found = set()
    for doc in DOCS:
        # at the start of a (code) line, after a path, or opening inline code: not `helm install agents-operator`
        found |= set(re.findall(r"(?:^\s*|`|/)agents-operator ([a-z][a-z-]*)", doc.read_text(), flags=re.M))
    return found


@pytest.mark.parametrize("command", sorted(_mentioned()))
def test_documented_commands_exist(command):
    assert command in _commands()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    prose = re.sub(r"`[^`\n]*`", "", doc.read_text())
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}"
