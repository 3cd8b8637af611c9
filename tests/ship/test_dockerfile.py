"""The image: hadolint-clean, and built the way the chart and the rendered pods expect."""

import re
import tomllib
from pathlib import Path

from agents_operator import render
from tests.ship import tools

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def test_hadolint_passes(tmp_path):
    tools.run(tools.hadolint(), "--failure-threshold", "info", str(DOCKERFILE), home=tmp_path)


def _final_stage() -> str:
    return re.split(r"^FROM ", DOCKERFILE.read_text(), flags=re.M)[-1]


def test_final_stage_runs_as_the_uid_the_pods_expect():
    final = _final_stage()
    assert re.search(rf"^USER {render.RUN_AS}:{render.RUN_AS}$", final, flags=re.M)
    assert 'ENTRYPOINT ["agents-operator"]' in final


def test_final_stage_has_no_build_tools():
    final = _final_stage()
    assert "pip install" not in final and "apt-get" not in final
    assert "COPY --from=build /opt/venv /opt/venv" in final


def test_image_installs_what_the_tensorboard_deployment_runs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [r for r in extras["tensorboard"] if r.startswith("tensorboard")]
    assert '"./[trainer,tensorboard]"' in DOCKERFILE.read_text()
