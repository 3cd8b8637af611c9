"""The Argo CD health check in docs/gitops.md, run in Lua 5.1 (the language of Argo CD's gopher-lua) against
statuses that the operator's own reconcile logic writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lupa import lua51

from agents_operator import naming
from tests.world import World, make_job

GITOPS = Path(__file__).resolve().parents[2] / "docs" / "gitops.md"


@pytest.fixture(scope="module")
def script() -> str:
    (block,) = re.findall(r"```lua\n(.*?)```", GITOPS.read_text(), flags=re.S)
    return block


def health(script: str, obj: dict) -> tuple[str, str]:
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    return result["status"], result["message"]


def _world(**kwargs) -> World:
    world = World(make_job(**kwargs))
    world.started()
    world.settle()
    return world


def _job(world: World) -> dict:
    assert world.job is not None
    return world.job


def test_the_configmap_key_names_the_kind():
    assert f"resource.customizations.health.{naming.GROUP}_{naming.KIND}:" in GITOPS.read_text()


def test_no_status_yet(script):
    assert health(script, make_job()) == ("Progressing", "Waiting for the operator")


def test_running_is_progressing_with_the_global_step(script):
    world = _world()
    assert world.status["state"] == "Running"
    assert health(script, _job(world)) == ("Progressing", "Running")
    world.job["status"]["progress"] = {"globalStep": 1200}
    assert health(script, _job(world)) == ("Progressing", "Running, global step 1200")


def test_restarting_is_progressing(script):
    world = _world(restart="OnFailure")
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=137, reason="OOMKilled")
    world.step()
    assert world.status["state"] == "Restarting"
    assert health(script, _job(world)) == ("Progressing", "Restarting")


def test_succeeded_is_healthy(script):
    world = _world()
    world.set_phase(world.pod("worker", 0), "Succeeded", exit_code=0)
    world.settle()
    assert health(script, _job(world)) == ("Healthy", "ChiefSucceeded: pj-worker-0 succeeded")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [({"restart": "Never"}, "PodFailed"), ({"restart": "OnFailure", "backoff": 0}, "BackoffLimitExceeded")],
)
def test_failed_is_degraded_with_reason_and_message(script, kwargs, reason):
    world = _world(**kwargs)
    world.set_phase(world.pod("worker", 1), "Failed", exit_code=1)
    world.settle()
    status, message = health(script, _job(world))
    assert status == "Degraded"
    assert message.startswith(f"{reason}: pod pj-worker-1 failed (exit code 1")


def test_invalid_spec_is_degraded(script):
    world = World(make_job(preset="no_such_preset"))
    world.settle()
    status, message = health(script, _job(world))
    assert (status, message.split(":")[0]) == ("Degraded", "InvalidSpec")


def test_suspended_then_resumed(script):
    world = _world(suspend=True)
    assert health(script, _job(world)) == ("Suspended", "JobSuspended: the job is suspended: its pods are deleted")
    world.job["spec"]["runPolicy"]["suspend"] = False
    world.started()
    world.settle()
    assert health(script, _job(world)) == ("Progressing", "Running")


@pytest.mark.parametrize(
    ("state", "expected"),
    [("Failed", "Degraded"), ("Succeeded", "Healthy"), ("Suspended", "Suspended"), ("Created", "Progressing")],
)
def test_state_alone(script, state, expected):
    assert health(script, {"status": {"state": state}})[0] == expected
