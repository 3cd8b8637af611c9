"""The documentation names only commands that exist and links only to files that exist."""

import itertools
import re
from pathlib import Path

import pytest

from agents_operator import cli
from agents_operator.trainer import rundir, summaries

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


def _table_after(doc: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table below `heading` in docs/`doc`, header and rule left out."""
    lines = (ROOT / "docs" / doc).read_text().split(f"\n{heading}\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def test_summaries_table_lists_exactly_the_tags_written():
    documented = set().union(*(_names(row[0]) for row in _table_after("trainer.md", "## Summaries")))
    assert documented == set(summaries.TAGS)


def test_run_directory_table_lists_exactly_what_a_run_directory_holds():
    documented = [name for row in _table_after("architecture.md", "## Run directory") for name in _names(row[0])]
    assert sorted(documented) == sorted(rundir.LAYOUT)


def test_the_trainers_run_directory_listing_names_what_the_trainer_writes():
    block = (ROOT / "docs" / "trainer.md").read_text().split("## The run directory\n\n```\n", 1)[1].split("```")[0]
    top = {line.split()[0].removeprefix("DIR/") for line in block.splitlines()}
    top = {name.split("/")[0] + "/" if name.count("/") > 1 else name for name in top}
    assert top == set(rundir.LAYOUT) - {f"{rundir.LOGS}/"}
