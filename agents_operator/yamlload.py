"""Loading untrusted YAML with bounds: size, nesting depth, alias expansion, duplicate keys, unbuildable values.

A manifest is checked in one pass over the parser's events before any object is built, so a hostile file
(a 10 MB manifest, an alias bomb, ten thousand nested lists, a 5000-digit integer, `!!timestamp 2001-02-30`) is
refused in milliseconds with one line naming the place, instead of running for minutes or ending in a
traceback. Only then is it loaded, with libyaml's `CSafeLoader` where PyYAML was built with it. Pure module.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 1536 * 1024
"""1.5 MiB: etcd's default request limit (`--max-request-bytes`, https://etcd.io/docs/latest/dev-guide/limit/),
so no API server backed by a default etcd can store a larger object. kube-apiserver's own limit on a request
body is higher, 3 MiB (`MaxRequestBodyBytes` = 3145728 in k8s.io/apiserver/pkg/server/config.go), so the
smaller of the two is the one that decides. A manifest is a few KB."""
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings; a pod template needs about 12."""
MAX_NODES = 100_000
"""Nodes of the whole stream once every alias is expanded (what a consumer walking it would visit)."""

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_IMPLICIT = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}


class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader where PyYAML has it. A plain `2024-01-01` stays a string, as kubectl reads it
    (sigs.k8s.io/yaml: go-yaml v2 decodes a timestamp into an untyped value as its text), so validate judges
    the value the API server will receive."""

    yaml_implicit_resolvers = _IMPLICIT


class _Resolver(yaml.resolver.Resolver):
    """Resolves the tags of plain scalars as Loader does, for check_bounds."""

    yaml_implicit_resolvers = _IMPLICIT


_RESOLVER = _Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_STR_TAG = "tag:yaml.org,2002:str"
_BUILD_ERRORS = (ValueError, TypeError, LookupError, AttributeError, ArithmeticError, yaml.YAMLError)
"""What PyYAML's safe constructors raise on a scalar they cannot build (int('9'*5000), 2001-02-30,
`!!bool maybe`, `!!int ''`)."""


class YAMLBoundsError(ValueError):
    """The text exceeds a bound, repeats a key or holds a value that cannot be built; `line` (1-based) and
    `path` say where, when known."""

    def __init__(self, reason: str, line: int | None = None, path: str = ""):
        self.reason, self.line, self.path = reason, line, path
        super().__init__(f"{path}: {reason}" if path else reason)


@dataclass
class _Collection:
    """A list or mapping being read: its expanded size so far, its keys, and where the next value goes."""

    anchor: str | None
    mapping: bool
    size: int = 1
    keys: set = field(default_factory=set)
    expect_key: bool = True
    key: str | None = None
    """The text of the key being read (for paths); `keys` holds the built values, which decide duplicates."""


def _path(stack: list[_Collection]) -> str:
    parts = [c.key for c in stack if c.mapping and c.key is not None]
    return ".".join(str(p) for p in parts)


def _add(stack: list[_Collection], size: int, total: list[int], line: int | None) -> None:
    """Count a finished node of `size` expanded nodes into its parent, or into the stream's total."""
    if stack:
        stack[-1].size += size
        count = stack[-1].size
    else:
        total[0] += size
        count = total[0]
    if count > MAX_NODES:
        raise YAMLBoundsError(f"more than {MAX_NODES} nodes once aliases are expanded", line, _path(stack))


def _scalar_or_alias(event: yaml.Event, stack: list[_Collection], sizes: dict[str, int], line: int | None) -> int:
    """The expanded size of a scalar or alias; records mapping keys and refuses repeated ones."""
    if isinstance(event, yaml.AliasEvent):
        if event.anchor not in sizes:
            raise YAMLBoundsError(f"alias *{event.anchor} refers to an unfinished or unknown anchor", line)
        size = sizes[event.anchor]
    else:
        size = 1
        if event.anchor:
            sizes[event.anchor] = 1
    parent = stack[-1] if stack else None
    is_key = parent is not None and parent.mapping and parent.expect_key
    value = _scalar_value(event, line, stack) if isinstance(event, yaml.ScalarEvent) else None
    if is_key:
        key = event.value if isinstance(event, yaml.ScalarEvent) else None
        if key is not None and key != "<<":
            if _hashable(value) in parent.keys:
                raise YAMLBoundsError(f"duplicate key {key!r}", line, ".".join(filter(None, [_path(stack[:-1]), key])))
            parent.keys.add(_hashable(value))
        parent.key = key
    return size


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None), datetime.date)) else repr(value)


def _scalar_value(event: yaml.ScalarEvent, line: int | None, stack: list[_Collection]) -> Any:
    """The value the loader will build from a scalar, so that keys are compared as values (`1` and `'1'`
    differ, `1` and `0x1` are one key, as in the built mapping), and a value that cannot be built is
    refused here with its place."""
    tag = event.tag
    if tag in (None, "!"):
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
    build = _CONSTRUCTOR.yaml_constructors.get(tag)
    if tag == _STR_TAG or build is None:
        return event.value
    try:
        return build(_CONSTRUCTOR, yaml.ScalarNode(tag, event.value))
    except _BUILD_ERRORS as err:
        shown = event.value if len(event.value) <= 40 else event.value[:40] + "…"
        detail = "not one of its values" if isinstance(err, KeyError) else err
        raise YAMLBoundsError(
            f"cannot read {shown!r} as {tag.rsplit(':', 1)[-1]}: {detail}", line, _path(stack)
        ) from None


def check_bounds(text: str) -> None:
    """Raise YAMLBoundsError when `text` breaks a bound (size, depth, expanded nodes, duplicate keys)."""
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise YAMLBoundsError(f"larger than {MAX_BYTES} bytes, the most an API server (etcd) stores")
    stack: list[_Collection] = []
    sizes: dict[str, int] = {}
    total = [0]
    for event in yaml.parse(text, Loader=Loader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if stack and stack[-1].mapping and stack[-1].expect_key:
                stack[-1].key = None  # a complex key: no path part
            stack.append(_Collection(event.anchor, isinstance(event, yaml.MappingStartEvent)))
            if len(stack) > MAX_DEPTH:
                raise YAMLBoundsError(f"nested more than {MAX_DEPTH} levels deep", line, _path(stack))
            continue
        if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            done = stack.pop()
            if done.anchor:
                sizes[done.anchor] = done.size
            size = done.size
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            size = _scalar_or_alias(event, stack, sizes, line)
        else:
            continue
        _add(stack, size, total, line)
        if stack and stack[-1].mapping:
            stack[-1].expect_key = not stack[-1].expect_key


def load_all(text: str) -> list:
    """The documents of `text`, after `check_bounds`; yaml.YAMLError or YAMLBoundsError when it is bad."""
    check_bounds(text)
    try:
        return list(yaml.load_all(text, Loader=Loader))
    except _BUILD_ERRORS as err:
        if isinstance(err, yaml.YAMLError):
            raise
        raise YAMLBoundsError(f"cannot build a value: {err}") from None  # check_bounds tries them all first
