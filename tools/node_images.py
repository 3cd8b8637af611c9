"""`make e2e-node`'s images: both Dockerfile targets, built with podman on a stand-in base made here by debootstrap,
saved as one archive the node imports. Each step is reused while its inputs are unchanged.

Nothing is pulled from a registry. The base is Debian bookworm's python3 (`debootstrap --variant=minbase`, the
recipe of docs/operations.md) from the mirror this machine's apt uses, with this machine's extra CA certificates
and a pip config that trusts them, so that the Dockerfile's hashed `pip install` reaches the package index
through this machine's egress. Cache keys:

- the base: a hash of the recipe (suite, packages, CA files); image `localhost/agents-base:KEY`;
- the images: a hash of the base key and everything the Dockerfile copies (Dockerfile, locks, pyproject.toml,
  README.md, agents_operator/); tags `agents-operator:e2e-KEY` and `agents-operator-trainer:e2e-KEY`, and the
  archive `CACHE/images-KEY.tar` (older archives are removed).

Prints one JSON line: the tag, the archive and what was built or reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # stdlib and the pure naming module only

import image  # tools/image.py: the Dockerfile's targets and build arguments

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("AGENTS_NODE_CACHE") or Path.home() / ".cache" / "agents-operator" / "node-e2e")
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
EXTRA_CAS = Path("/usr/local/share/ca-certificates")
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
PIP_CONF = "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
# What the Dockerfile copies into the image (.dockerignore admits exactly these).
INPUTS = ("Dockerfile", "pyproject.toml", "README.md", "locks", "agents_operator")
TAG_PREFIX = "e2e-"
# RUN steps in a chroot on the host's network: no OCI runtime (crun refuses this host's hybrid cgroups) and no
# network of its own to set up; the layers are cached between builds.
BUILD_OPTIONS = ("--isolation", "chroot", "--network", "host", "--layers")
# The name containerd gives an image saved as `repository:tag`, and the one the kubelet looks up for it.
REGISTRY = "docker.io/library"


def _run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    """A build step; what it prints goes to stderr, so that stdout holds only the report."""
    kwargs.setdefault("stdout", sys.stderr)
    return subprocess.run(command, check=True, **kwargs)


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def mirror() -> str:
    """The Debian mirror of this machine's apt sources (the main archive, not the security one)."""
    for path in APT_SOURCES:
        if path.exists():
            for uri in re.findall(r"^\s*(?:URIs:|deb)\s+(\S+)", path.read_text(), re.M):
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    raise SystemExit(f"e2e-node: no Debian mirror in {' or '.join(map(str, APT_SOURCES))}")


def _extra_cas() -> list[Path]:
    return sorted(EXTRA_CAS.glob("*.crt")) if EXTRA_CAS.is_dir() else []


def base_key() -> str:
    recipe = json.dumps([SUITE, PACKAGES, PIP_CONF]).encode()
    return _digest([recipe, *(ca.read_bytes() for ca in _extra_cas())])


def inputs_key(base: str) -> str:
    files = []
    for name in INPUTS:
        path = ROOT / name
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in found if "__pycache__" not in p.parts and p.suffix != ".pyc"]
    parts = [base.encode()]
    for path in files:
        parts += [str(path.relative_to(ROOT)).encode(), path.read_bytes()]
    return _digest(parts)


def _exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name], check=False).returncode == 0


def ensure_base(key: str) -> tuple[str, bool]:
    """The stand-in base image for this key, made when missing; (name, whether it was made now)."""
    name = f"localhost/agents-base:{key}"
    if _exists(name):
        return name, False
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
    try:
        _run("debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), mirror())
        for ca in _extra_cas():
            shutil.copy(ca, rootfs / "usr/local/share/ca-certificates" / ca.name)
        _run("chroot", str(rootfs), "update-ca-certificates")
        (rootfs / "etc/pip.conf").write_text(PIP_CONF)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        _run("podman", "import", "--change", "CMD=/bin/bash", "-", name, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit("e2e-node: tar of the base's root file system failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return name, True


def tags(key: str) -> dict[str, str]:
    """target -> `repository:e2e-KEY`, as the chart (image.tag) and the kubelet name them."""
    return {target: f"{repository}:{TAG_PREFIX}{key}" for target, repository in image.REPOSITORIES.items()}


def ensure_images(base: str, key: str) -> tuple[Path, list[str]]:
    """The archive holding both targets for this key; (its path, the targets built now)."""
    archive = CACHE / f"images-{key}.tar"
    wanted = tags(key)
    built = []
    for target, name in wanted.items():
        if not _exists(f"{REGISTRY}/{name}"):
            command = image.build_command("podman", target, base, name=f"{REGISTRY}/{name}")
            _run(*command[:2], *BUILD_OPTIONS, *command[2:])
            built.append(target)
    if built:
        _prune(wanted)
    if built or not archive.exists():
        for old in CACHE.glob("images-*.tar"):
            old.unlink()
        partial = archive.with_suffix(".partial")
        _run("podman", "save", "--format", "docker-archive", "-m", "-o", str(partial),
             *(f"{REGISTRY}/{n}" for n in wanted.values()))  # fmt: skip
        partial.rename(archive)
    return archive, built


def _prune(kept: dict[str, str]) -> None:
    """Remove the e2e images of other keys (each trainer is 2.5 GB). The untagged images of the build stages
    stay: they are the layer cache of the next build."""
    listed = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], check=True, capture_output=True, text=True
    ).stdout.split()
    ours = {f"{REGISTRY}/{repository}" for repository in image.REPOSITORIES.values()}
    keep = {f"{REGISTRY}/{name}" for name in kept.values()}
    stale = [n for n in listed if n.rsplit(":", 1)[0] in ours and f":{TAG_PREFIX}" in n and n not in keep]
    if stale:
        subprocess.run(["podman", "rmi", *stale], check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    for tool in ("podman", "debootstrap"):
        if shutil.which(tool) is None:
            raise SystemExit(f"e2e-node: {tool} is not installed (apt-get install podman debootstrap)")
    started = time.monotonic()
    try:
        base, base_made = ensure_base(base_key())
        key = inputs_key(base.rsplit(":", 1)[1])
        archive, built = ensure_images(base, key)
        if built and inputs_key(base.rsplit(":", 1)[1]) != key:  # the build may hold either version
            for name in tags(key).values():
                subprocess.run(["podman", "rmi", f"{REGISTRY}/{name}"], check=False, capture_output=True)
            archive.unlink()
            raise SystemExit("e2e-node: the sources changed during the build; nothing was kept, run it again")
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"e2e-node: {' '.join(map(str, err.cmd))} exited {err.returncode}") from None
    report = {
        "tag": f"{TAG_PREFIX}{key}",
        "archive": str(archive),
        "base": base,
        "base_made": base_made,
        "built": built,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
