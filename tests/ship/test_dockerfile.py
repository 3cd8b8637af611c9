"""The images: hadolint-clean, built from the hashed locks, and run the way the chart and the rendered pods expect."""

import re
from pathlib import Path

import pytest

from agents_operator import render
from tests import locktools
from tests.ship import tools

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
RUNTIME_TARGETS = ("operator", "trainer")


def stages() -> dict[str, str]:
    """Stage name -> its text from the FROM line on."""
    found = {}
    for text in re.split(r"^(?=FROM )", DOCKERFILE.read_text(), flags=re.M)[1:]:
        name = re.match(r"FROM \S+ AS (\S+)", text)
        assert name, f"unnamed stage: {text.splitlines()[0]}"
        found[name[1]] = text
    return found


def parent(stage: str) -> str:
    return re.match(r"FROM (\S+)", stages()[stage])[1]


def test_hadolint_passes(tmp_path):
    tools.run(tools.hadolint(), "--failure-threshold", "info", str(DOCKERFILE), home=tmp_path)


def test_the_base_is_pinned_by_digest_through_one_arg():
    assert re.search(r"^ARG BASE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}$", DOCKERFILE.read_text(), re.M)
    assert {parent(stage) for stage in stages()} <= {"${BASE}", *stages()}


@pytest.mark.parametrize("target", RUNTIME_TARGETS)
def test_runtime_targets_run_as_the_uid_the_pods_expect(target):
    assert parent(target) == "runtime"
    runtime = stages()["runtime"]
    assert re.search(rf"^USER {render.RUN_AS}:{render.RUN_AS}$", runtime, flags=re.M)
    assert 'ENTRYPOINT ["agents-operator"]' in runtime


@pytest.mark.parametrize("stage", ["runtime", *RUNTIME_TARGETS])
def test_runtime_stages_have_no_build_tools(stage):
    text = stages()[stage]
    assert "pip install" not in text and "apt-get" not in text and "pip " not in text


@pytest.mark.parametrize("target", RUNTIME_TARGETS)
def test_each_target_copies_the_venv_installed_from_its_own_lock(target):
    assert f"COPY --from=build-{target} /opt/venv /opt/venv" in stages()[target]
    build = stages()[f"build-{target}"]
    assert f"--require-hashes -r locks/{target}.txt" in build
    assert f"locks/{target}.txt" in locktools.recipes()


def test_every_install_from_an_index_requires_hashes():
    installs = re.findall(r"pip (?:--python \S+ )?install [^&\n]*", DOCKERFILE.read_text())
    assert installs
    for install in installs:
        assert "--require-hashes" in install or "--no-deps /dist/*.whl" in install, install


def test_the_trainer_serves_the_tensorboard_deployment():
    assert "tensorboard" in locktools.recipes()["locks/trainer.txt"]


def test_runtime_stages_are_labelled_from_build_args():
    runtime = stages()["runtime"]
    for key, arg in (("source", "SOURCE"), ("version", "VERSION"), ("revision", "REVISION")):
        assert f"ARG {arg}" in runtime
        assert f'org.opencontainers.image.{key}="${{{arg}}}"' in runtime
    for target in RUNTIME_TARGETS:
        assert "org.opencontainers.image.title=" in stages()[target]
