"""The run directory (trainer/rundir.py): the config, preset and summary files the trainer writes there, read
back or refused in one line, and the check that a run may resume with the settings it is given."""

import os
import time

import pytest

from agents_operator import presets
from agents_operator.config import CHANGEABLE_ON_RESUME
from agents_operator.trainer import rundir


def test_the_config_round_trips_and_no_run_is_none(tmp_path):
    assert rundir.load_config(tmp_path) is None
    config = presets.resolve("hopper", {"learning_rate": 1e-4})
    rundir.write_config(tmp_path / "new" / "run", config)
    assert rundir.load_config(tmp_path / "new" / "run") == config
    assert [p.name for p in (tmp_path / "new" / "run").iterdir()] == [rundir.CONFIG_FILE]  # no temporary left


@pytest.mark.parametrize(
    ("text", "reason"),
    [("epochs: [\n", "invalid config: not YAML: "), ("epochs: 0\n", "invalid config: epochs: Input should be greater")],
)
def test_a_config_that_cannot_be_read_is_one_line_naming_the_file(tmp_path, text, reason):
    (tmp_path / rundir.CONFIG_FILE).write_text(text)
    with pytest.raises(rundir.UnreadableConfig) as error:
        rundir.load_config(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / rundir.CONFIG_FILE}: {reason}") and "\n" not in str(error.value)


def test_the_preset_is_recorded_when_there_is_one(tmp_path):
    assert rundir.load_preset(tmp_path) is None
    rundir.write_preset(tmp_path, "cheetah")
    assert rundir.load_preset(tmp_path) == "cheetah"
    (tmp_path / rundir.PRESET_FILE).write_text("\n")
    assert rundir.load_preset(tmp_path) is None


def test_the_summary_is_this_runs_only_when_written_since_it_started(tmp_path):
    since = time.time()
    rundir.write_summary(tmp_path, {"env_steps": 16384, "global_step": 8, "note": "x"})
    assert rundir.load_summary(tmp_path, since) == {"env_steps": 16384.0, "global_step": 8.0}  # numbers only
    old = since - 60
    os.utime(tmp_path / rundir.SUMMARY_FILE, (old, old))
    assert rundir.load_summary(tmp_path, since) is None
    assert rundir.load_summary(tmp_path) is not None  # from the beginning of time
    (tmp_path / rundir.SUMMARY_FILE).write_text("[1, 2]\n")
    assert rundir.load_summary(tmp_path) is None
    (tmp_path / rundir.SUMMARY_FILE).write_text("a: [\n")
    assert rundir.load_summary(tmp_path) is None
    assert rundir.load_summary(tmp_path / "none") is None


def test_a_resumed_run_may_change_only_what_does_not_change_learning():
    saved = presets.resolve("pendulum")
    rundir.check_resume(saved, saved.model_copy(update={key: getattr(saved, key) for key in CHANGEABLE_ON_RESUME}))
    rundir.check_resume(saved, saved.model_copy(update={"total_steps": 10 * saved.total_steps, "eval_every": 0}))
    with pytest.raises(rundir.ConfigConflict) as error:
        rundir.check_resume(saved, saved.model_copy(update={"learning_rate": 0.5, "policy_layers": [8]}))
    assert sorted(c.split(" ")[0] for c in error.value.conflicts) == ["learning_rate", "policy_layers"]
    assert "learning_rate (saved 0.001, given 0.5)" in str(error.value)
    assert f"settings differ from the run's {rundir.CONFIG_FILE}" in str(error.value)


def test_the_layout_names_each_file_once():
    assert len(set(rundir.LAYOUT)) == len(rundir.LAYOUT)
    assert {rundir.CONFIG_FILE, rundir.PRESET_FILE, rundir.SUMMARY_FILE, rundir.VIDEO} <= set(rundir.LAYOUT)
