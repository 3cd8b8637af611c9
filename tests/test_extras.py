"""The install split: `pip install agents-operator` runs the CLI and the operator, `[trainer]` adds learning.

The operator image installs no trainer extra, so every command it runs must import none of that stack; a
command that did would fail there with ModuleNotFoundError. Each command runs in a fresh interpreter, which
then reports the trainer modules it loaded.
"""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXAMPLE = str(ROOT / "examples" / "pendulum.yaml")

# Top-level modules of the trainer extra (and what it pulls in: numpy through TensorFlow and gymnasium).
TRAINER_MODULES = (
    "tensorflow",
    "keras",
    "numpy",
    "gymnasium",
    "pybullet",
    "pybullet_envs_gymnasium",
    "matplotlib",
    "pygame",
    "imageio",
    "imageio_ffmpeg",
    "PIL",
    "grpc",
)

# Runs the CLI with ARGV (or imports MODULE), then prints which TRAINER_MODULES are loaded, as JSON.
_PROBE = """
import importlib, json, sys
argv, module, names = json.loads(sys.argv[1])
if module:
    importlib.import_module(module)
else:
    from agents_operator import cli
    try:
        cli.main(argv)
    except SystemExit:
        pass
print(json.dumps(sorted(n for n in names if n in sys.modules)))
"""


def _loaded(argv: list[str], module: str = "") -> list[str]:
    probe = json.dumps([argv, module, TRAINER_MODULES])
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, probe], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--help"], ["train", "--help"], ["validate", EXAMPLE], ["render", EXAMPLE], ["crd"]],
    ids=lambda argv: " ".join(argv[:2]).replace(EXAMPLE, "FILE"),
)
def test_operator_commands_import_no_trainer_stack(argv):
    assert _loaded(argv) == []


@pytest.mark.parametrize("module", ["agents_operator.operator_main", "agents_operator.local"])
def test_what_run_and_local_load_imports_no_trainer_stack(module):
    """`run` (the operator) and `local` (which starts trainers as processes) load these modules."""
    assert _loaded([], module) == []


def test_the_probe_sees_the_trainer_stack_when_it_is_loaded():
    assert {"tensorflow", "numpy"} <= set(_loaded([], "agents_operator.trainer.learner"))


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def test_base_dependencies_leave_the_learning_stack_to_the_trainer_extra():
    base = _names(PROJECT["dependencies"])
    trainer = _names(PROJECT["optional-dependencies"]["trainer"])
    assert {"kopf", "kubernetes", "pydantic", "pyyaml"} <= base
    assert {"tensorflow-cpu", "gymnasium", "pybullet", "matplotlib", "pygame", "imageio-ffmpeg"} <= trainer
    assert not base & trainer


def test_the_test_extra_installs_the_trainer_stack():
    assert "agents-operator[trainer]" in PROJECT["optional-dependencies"]["test"]


# pybullet_envs_gymnasium's envs and pygame's rendering, with pkg_resources (setuptools) made unimportable.
_WITHOUT_SETUPTOOLS = """
import os, sys
sys.modules["pkg_resources"] = sys.modules["setuptools"] = None
os.environ["SDL_VIDEODRIVER"] = "dummy"
import gymnasium, pybullet_envs_gymnasium
for env_id in ("HalfCheetahBulletEnv-v0", "Pendulum-v1"):
    env = gymnasium.make(env_id, render_mode="rgb_array")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert env.render().ndim == 3
    env.close()
"""


def test_trainer_runs_without_setuptools():
    """Why the trainer extra (and image) has no setuptools: what we import works without pkg_resources."""
    assert "setuptools" not in _names(PROJECT["optional-dependencies"]["trainer"])
    subprocess.run([sys.executable, "-c", _WITHOUT_SETUPTOOLS], capture_output=True, check=True, timeout=120)
