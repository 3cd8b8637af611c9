"""Reading the lock files and the Makefile recipes that write them (tests/test_locks.py, tests/ship)."""

import re
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# `$(LOCK) [--no-deps] SOURCE [--extra X ...] -o locks/NAME.txt` in the Makefile.
_RECIPE = re.compile(r"^\t\$\(LOCK\) (?P<args>.*?) -o (?P<lock>locks/\S+\.txt)$", re.M)
_PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)")


def recipes() -> dict[str, list[str]]:
    """Lock file -> the arguments the Makefile compiles it from."""
    found = {m["lock"]: m["args"].split() for m in _RECIPE.finditer((ROOT / "Makefile").read_text())}
    assert found, "no `$(LOCK) ... -o locks/X.txt` recipe in the Makefile"
    return found


def pins(lock: Path) -> dict[str, str]:
    """Package -> pinned version; fails on a pin without a hash (pip would refuse it with --require-hashes)."""
    pinned = {}
    for entry in re.split(r"\n(?=\S)", lock.read_text()):
        match = _PIN.match(entry)
        if match is None:
            assert entry.startswith("#") or not entry.strip(), f"{lock}: unexpected line {entry!r}"
            continue
        assert "--hash=sha256:" in entry, f"{lock}: {match['name']} has no hash"
        pinned[canonicalize_name(match["name"])] = match["version"]
    return pinned
