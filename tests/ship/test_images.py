"""Both images, built for real (`make image`'s builder) and run the way pods run them: read-only, as UID 1000.

Skipped, with the reason, where no docker or podman works or where the base image is not present locally
(nothing is pulled here). AGENTS_IMAGE_BASE names a stand-in base (docs/operations.md says how to make one).
"""

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from agents_operator import render

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"

_spec = importlib.util.spec_from_file_location("image", ROOT / "tools" / "image.py")
image = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(image)

pytestmark = pytest.mark.slow
# Two PPO iterations of 128 environment steps each, without evaluation, checkpoints or video in between.
TWO_ITERATIONS = {
    "envs_per_worker": 2,
    "envs_per_process": 2,
    "rollout_steps": 64,
    "minibatches": 4,
    "epochs": 2,
    "total_steps": 256,
    "eval_every": 100,
    "checkpoint_every": 100,
    "video_episodes": 0,
}


@pytest.fixture(scope="module")
def built():
    """tool, {target: tag} after building both targets (cached layers make a rebuild quick)."""
    tool = image.builder()
    if tool in (None, "buildah"):
        pytest.skip(f"no docker or podman that answers here (found: {tool}); buildah alone cannot run the images")
    base = os.environ.get("AGENTS_IMAGE_BASE") or re.search(r"^ARG BASE=(\S+)$", DOCKERFILE.read_text(), re.M)[1]
    if subprocess.run([tool, "image", "inspect", base], capture_output=True, check=False).returncode != 0:
        pytest.skip(f"base image {base} is not present here; pull it or set AGENTS_IMAGE_BASE to a stand-in")
    for target in image.REPOSITORIES:
        subprocess.run(image.build_command(tool, target, base), capture_output=True, check=True, timeout=3600)
    return tool, {target: image.tag(target) for target in image.REPOSITORIES}


def _run(built, target: str, *argv: str, entrypoint: str | None = None) -> subprocess.CompletedProcess:
    tool, tags = built
    pod_like = ["--rm", "--read-only", "--tmpfs", "/tmp", "--user", f"{render.RUN_AS}:{render.RUN_AS}"]
    if entrypoint:
        pod_like += ["--entrypoint", entrypoint]
    command = [tool, "run", *pod_like, tags[target], *argv]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)


def test_operator_image_runs_the_operator_cli(built):
    done = _run(built, "operator", "run", "--help")
    assert done.returncode == 0, done.stderr
    assert "--trainer-image" in done.stdout


def test_trainer_image_trains_two_iterations_read_only(built):
    settings = [arg for key, value in TWO_ITERATIONS.items() for arg in ("--set", f"{key}={value}")]
    done = _run(built, "trainer", "train", "--config", "pendulum", *settings, "--logdir", "/tmp/run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: 256 env steps, 2 iterations" in done.stderr + done.stdout


@pytest.mark.parametrize("target", list(image.REPOSITORIES))
def test_images_answer_help_and_hold_no_packaging_tools(built, target):
    assert _run(built, target, "--help").returncode == 0
    for module in ("pip", "setuptools", "wheel"):
        assert _run(built, target, "-c", f"import {module}", entrypoint="python").returncode != 0, module


def test_operator_image_holds_no_learning_stack(built):
    for module in ("tensorflow", "gymnasium", "pybullet", "matplotlib", "pygame", "imageio_ffmpeg"):
        assert _run(built, "operator", "-c", f"import {module}", entrypoint="python").returncode != 0, module
