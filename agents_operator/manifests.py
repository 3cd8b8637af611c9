"""Reading and writing YAML manifests, with errors that name the file and the line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from agents_operator import yamlload
from agents_operator.api import AgentsJob, InvalidJob, parse_job


class ManifestError(ValueError):
    """A file that cannot be read or parsed; the message starts with the file name."""


class _NoAliases:
    """Plain YAML: no anchors or aliases where the same object appears twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class PureDumper(_NoAliases, yaml.SafeDumper):
    """PyYAML's own emitter, in Python."""


Dumper: type = type("Dumper", (_NoAliases, yaml.CSafeDumper), {}) if hasattr(yaml, "CSafeDumper") else PureDumper
"""libyaml's emitter where PyYAML was built with it: the same text, 15 to 20 times faster (a 999 ps + 999 worker
job is 135 MB of YAML: 10 s instead of 205 s); tests/test_manifests.py holds the two to the same output."""


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=Dumper, sort_keys=False, width=120)


def dump_all(objs: Iterable[Any], dumper: type = Dumper) -> str:
    return yaml.dump_all(list(objs), Dumper=dumper, sort_keys=False, width=120)


def _yaml_problem(err: yaml.YAMLError, text: str) -> str:
    """':line:column: invalid YAML: problem' in one line, whichever stage of PyYAML raised `err`."""
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow; no mark, a position
        before = text[: err.position]
        where = f":{before.count(chr(10)) + 1}:{err.position - before.rfind(chr(10))}"
        return f"{where}: invalid YAML: {err.reason} #x{err.character:04x}"
    mark = getattr(err, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    return f"{where}: invalid YAML: {problem}"


def load_documents(path: str | Path) -> list[Any]:
    """The non-empty YAML documents of a file ('-' reads standard input)."""
    name = str(path)
    try:
        if name == "-":
            import sys

            text = sys.stdin.read()
        else:
            text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ManifestError(f"{name}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    try:
        docs = [d for d in yamlload.load_all(text) if d is not None]
    except yamlload.YAMLBoundsError as err:
        where = f":{err.line}" if err.line else ""
        raise ManifestError(f"{name}{where}: {err}") from None
    except yaml.YAMLError as err:
        raise ManifestError(f"{name}{_yaml_problem(err, text)}") from None
    if not docs:
        raise ManifestError(f"{name}: no YAML document found")
    return docs


def load_job(path: str | Path) -> AgentsJob:
    """The one AgentsJob in a file; ManifestError names the file and every problem."""
    docs = load_documents(path)
    if len(docs) != 1:
        raise ManifestError(f"{path}: expected one AgentsJob, found {len(docs)} documents")
    try:
        return parse_job(docs[0])
    except InvalidJob as err:
        raise ManifestError("\n".join(f"{path}: {p}" for p in err.problems)) from None
