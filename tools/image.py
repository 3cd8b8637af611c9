"""`make image`: the Dockerfile's two targets, built with whichever of docker, podman or buildah works here.

Tags: `agents-operator:VERSION` (target operator) and `agents-operator-trainer:VERSION` (target trainer), the
names the chart, deploy/ and `render.DEFAULT_IMAGE` use. OCI labels get the version, the git revision and the
source (the `origin` remote) as build arguments. BASE overrides the Dockerfile's digest-pinned base image.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from agents_operator import __version__, naming  # stdlib only: `make image` needs no virtual environment

ROOT = Path(__file__).resolve().parent.parent
REPOSITORIES = {"operator": naming.OPERATOR_IMAGE, "trainer": naming.TRAINER_IMAGE}
# What proves a builder usable: docker needs a daemon, podman and buildah only themselves.
_PROBES = {"docker": ["docker", "info"], "podman": ["podman", "info"], "buildah": ["buildah", "version"]}


def builder() -> str | None:
    """The first of docker, podman, buildah that is installed and answers, or None."""
    for name, probe in _PROBES.items():
        if shutil.which(name) and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return name
    return None


def tag(target: str) -> str:
    return naming.image(REPOSITORIES[target])


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def build_command(tool: str, target: str, base: str | None, name: str | None = None) -> list[str]:
    """The build of one target, tagged `name` (default: `repository:VERSION`)."""
    command = [tool, "bud"] if tool == "buildah" else [tool, "build"]
    build_args = {
        "VERSION": __version__,
        "REVISION": _git("rev-parse", "HEAD"),
        "SOURCE": _git("remote", "get-url", "origin"),
    }
    if base:
        build_args["BASE"] = base
    for key, value in build_args.items():
        command += ["--build-arg", f"{key}={value}"]
    return [*command, "--target", target, "--tag", name or tag(target), str(ROOT)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="base image instead of the Dockerfile's pinned one")
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="operator, trainer (default: both)")
    args = parser.parse_args(argv)
    if unknown := set(args.targets) - set(REPOSITORIES):
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    tool = builder()
    if tool is None:
        print("make image: no working docker, podman or buildah here", file=sys.stderr)
        return 1
    for target in args.targets or REPOSITORIES:
        subprocess.run(build_command(tool, target, args.base), check=True)
        print(f"built {tag(target)} with {tool}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
