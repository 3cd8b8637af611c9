"""benchmarks/bench_overlap_learning.py on a tiny budget: both sides train through the learning table's runs,
resume, and the verdict is the stated test."""

from __future__ import annotations

import json

from benchmarks import bench_learning_table as table
from benchmarks import bench_overlap_learning as overlap


def _main(capsys, tmp_path, seeds: list[int]) -> dict:
    args = ["--tasks", "pendulum", "--seeds", *map(str, seeds), "--steps", "4096", "--results", str(tmp_path)]
    assert overlap.main(args) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_both_sides_train_each_seed_once_and_are_compared(tmp_path, capsys):
    first = _main(capsys, tmp_path, [0, 1])
    serial = table.run_dir(tmp_path, "pendulum", 0, 4096, {"overlap": False}) / table.RESULT
    overlapped = table.run_dir(tmp_path, "pendulum", 0, 4096, {"overlap": True}) / table.RESULT
    kept = overlapped.read_text()
    assert json.loads(serial.read_text())["variant"] == {"overlap": False}
    again = _main(capsys, tmp_path, [0, 1])  # resumed: nothing trains again
    assert overlapped.read_text() == kept and again["pendulum"] == first["pendulum"]
    task = first["pendulum"]
    assert task["env_steps"] == 4096 and len(task["serial"]["returns"]) == len(task["overlapped"]["returns"]) == 2
    assert task["return_difference"] == round(task["overlapped"]["mean"] - task["serial"]["mean"], 1)


def test_the_verdict_is_the_overlapped_mean_at_least_the_serial_mean_less_one_std():
    serial = {"mean": -170.0, "std": 5.0, "env_steps_per_s": 1000.0}
    assert overlap.verdict(serial, {"mean": -175.0, "env_steps_per_s": 1300.0}) == {
        "return_difference": -5.0,
        "within_seed_spread": True,
        "steps_per_s_ratio": 1.3,
    }
    assert not overlap.verdict(serial, {"mean": -175.1, "env_steps_per_s": 1.0})["within_seed_spread"]
    assert overlap.verdict(serial, {"mean": -100.0, "env_steps_per_s": 1.0})["within_seed_spread"]  # better
