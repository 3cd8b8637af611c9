"""`agents-operator scale` for a job that `local` runs (local/scaling.py): the count judged by the job's rules,
handed to the running launcher, which starts the added workers and stops the highest ones as the operator does."""

import io
import threading
import time
from pathlib import Path

import pytest
import yaml

from agents_operator import local
from agents_operator.local import scaling
from agents_operator.trainer import rundir
from tests.local.standins import job, script

# A stand-in worker: says it started, leaves on SIGTERM (saying so, exit 143), the chief ends when told.
WORKER = script(
    """
    import os, pathlib, signal, sys, time
    index, here = os.environ["AGENTS_REPLICA_INDEX"], pathlib.Path(os.environ["MARKS"])
    signal.signal(signal.SIGTERM, lambda *_: ((here / f"left-{index}").touch(), sys.exit(143)))
    (here / f"started-{index}").touch()
    while not (index == "0" and (here / "finish").exists()):
        time.sleep(0.05)
    """
)


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.05)


@pytest.fixture
def marks(tmp_path, monkeypatch) -> Path:
    here = tmp_path / "marks"
    here.mkdir()
    monkeypatch.setenv("MARKS", str(here))
    return here


def test_a_running_elastic_job_is_scaled_up_and_down_and_refuses_a_count_past_its_bounds(tmp_path, marks):
    console = io.StringIO()
    launcher = local.Launcher(job(WORKER, workers=1, elastic={"maxWorkers": 3}), tmp_path / "run", out=console)
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(launcher.run()))
    runner.start()
    try:
        wait_for(marks / "started-0")
        scaling.request(tmp_path / "run", 3)
        wait_for(marks / "started-1")
        wait_for(marks / "started-2")
        scaling.request(tmp_path / "run", 2)
        wait_for(marks / "left-2")  # SIGTERM, the highest index first
        assert not (marks / "left-1").exists() and not (marks / "left-0").exists()
        with pytest.raises(scaling.ScaleError, match=r"spec\.replicaSpecs\.worker\.replicas: .*must lie within"):
            scaling.request(tmp_path / "run", 4)
        (marks / "finish").touch()
    finally:
        runner.join(60)
        launcher.stop_all()
    assert outcome and outcome[0].succeeded
    status = yaml.safe_load((tmp_path / "run" / rundir.LOGS / local.STATUS_FILE).read_text())
    assert status["workers"] == 2 and status["restarts"] == 0
    said = console.getvalue()
    assert "Scaled: workers 1 -> 3: added" in said and "Scaled: workers 3 -> 2" in said
    kept = yaml.safe_load((tmp_path / "run" / rundir.LOGS / scaling.JOB_FILE).read_text())
    assert kept["spec"]["replicaSpecs"]["worker"]["replicas"] == 2


def test_a_job_that_is_not_elastic_refuses_a_scale(tmp_path):
    scaling.write_job(tmp_path, job(["true"]).model_dump(by_alias=True, exclude_none=True, mode="json"))
    with pytest.raises(scaling.ScaleError, match="replica counts are immutable"):
        scaling.request(tmp_path, 3)
    assert scaling.take(tmp_path) is None  # nothing was asked


def test_without_a_launcher_the_request_is_taken_back_and_said(tmp_path):
    with pytest.raises(scaling.ScaleError, match="no job that `agents-operator local` runs"):
        scaling.request(tmp_path, 2)
    scaling.write_job(
        tmp_path, job(["true"], workers=1, elastic={"maxWorkers": 3}).model_dump(by_alias=True, mode="json")
    )
    with pytest.raises(scaling.ScaleError, match="no `agents-operator local` took the request"):
        scaling.request(tmp_path, 2, timeout=0.3)
    assert scaling.take(tmp_path) is None


def test_take_reads_a_request_once(tmp_path):
    (tmp_path / rundir.LOGS).mkdir()
    (tmp_path / rundir.LOGS / scaling.REQUEST_FILE).write_text("workers: 3\n")
    assert scaling.take(tmp_path) == 3
    assert scaling.take(tmp_path) is None
    (tmp_path / rundir.LOGS / scaling.REQUEST_FILE).write_text("workers: three\n")
    assert scaling.take(tmp_path) is None


def test_a_request_the_rules_refuse_changes_nothing_and_is_said(tmp_path):
    console = io.StringIO()
    launcher = local.Launcher(job(["true"], workers=1, elastic={"maxWorkers": 3}), tmp_path, out=console)
    before = (launcher.manifest, list(launcher.replicas))
    launcher.scale(5)  # written by hand past `agents-operator scale`'s own check
    assert (launcher.manifest, launcher.replicas) == before
    assert "scale to 5 worker(s) refused: spec.replicaSpecs.worker.replicas:" in console.getvalue()
