"""Learning curves (trainer/plot.py): one chart of a tag over environment steps for several runs; no run with
a point of the tag is an error naming the runs."""

import pytest

from agents_operator import presets
from agents_operator.trainer import plot, rundir
from agents_operator.trainer.summaries import SummaryWriter


def run_with(logdir, points, env_id=None):
    writer = SummaryWriter(logdir)
    for step, value in points:
        writer.scalars(step, {"eval/mean_return": value})
    writer.close()
    if env_id:
        rundir.write_config(logdir, presets.resolve("pendulum", {"env_id": env_id}))
    return logdir


def test_every_run_with_points_is_drawn_and_counted(tmp_path):
    first = run_with(tmp_path / "a", [(128, -900.0), (256, -500.0)], env_id="Pendulum-v1")
    second = run_with(tmp_path / "b", [(128, -800.0)])  # no config.yaml: labelled by its name alone
    empty = run_with(tmp_path / "c", [])
    out = tmp_path / "curve.png"
    counts = plot.plot([first, second, empty], out, "eval/mean_return")
    assert counts == {str(first): 2, str(second): 1, str(empty): 0}
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_point_of_the_tag_anywhere_is_an_error_naming_the_runs(tmp_path):
    run = run_with(tmp_path / "a", [(128, -900.0)])
    with pytest.raises(ValueError, match=f"no 'loss/value' summaries in {run}, {tmp_path / 'none'}"):
        plot.plot([run, tmp_path / "none"], tmp_path / "curve.png", "loss/value")
    assert not (tmp_path / "curve.png").exists()
