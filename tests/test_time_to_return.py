"""benchmarks/bench_time_to_return.py: what each side trains, and how the time to the target is read off."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_sb3_compare, bench_time_to_return


def test_each_side_trains_the_preset_evaluated_every_so_many_steps():
    config = bench_time_to_return.our_config("hopper", max_steps=1_000_000, eval_every=81_920, seed=3)
    assert (config.env_id, config.total_steps, config.seed) == ("HopperBulletEnv-v0", 1_000_000, 3)
    assert config.eval_every * config.batch_size == 81_920  # whole iterations
    assert (config.video_episodes, config.export, config.metrics_port) == (0, False, 0)
    zoo = bench_sb3_compare.zoo(config)
    assert zoo["clip_schedule"] == "sb3_linear" and zoo["ppo"]["clip_range"] == 0.4
    assert {key: value for key, value in zoo.items() if key != "clip_schedule"} == {
        **bench_sb3_compare.zoo(config.model_copy(update={"env_id": "HalfCheetahBulletEnv-v0"})),
        "env_id": "HopperBulletEnv-v0",
    }


def test_the_first_evaluation_at_the_target_counts():
    evaluations = [[8192, 100.0, 30.0], [16384, 2600.0, 90.0], [24576, 2000.0, 150.0], [32768, 2700.0, 210.0]]
    assert bench_time_to_return.reached(evaluations, 2575.0) == {
        "reached": True,
        "at_env_steps": 16384,
        "minutes": 1.5,
        "return": 2600.0,
    }
    assert bench_time_to_return.reached(evaluations, 3000.0) == {"reached": False}


def test_the_record_compares_the_minutes_when_both_reached(monkeypatch, tmp_path):
    def ours(config):
        return {"evaluations": [[81920, 2950.0, 120.0]], "env_steps": 2_000_000, "steps_per_s": 1900.0}

    def zoo(python, config, eval_every, target):
        assert (eval_every, target) == (81_920, 2925.0)
        return {
            "evaluations": [[81920, 0.0, 100.0], [163840, 2930.0, 480.0]],
            "env_steps": 163840,
            "steps_per_s": 500.0,
        }

    monkeypatch.setattr(bench_time_to_return, "run_ours", ours)
    monkeypatch.setattr(bench_time_to_return, "run_zoo", zoo)
    args = bench_time_to_return.build_parser().parse_args(["--tasks", "cheetah", "--results", str(tmp_path)])
    record = bench_time_to_return.measure("cheetah", args, None)
    assert record["ours"]["minutes"] == 2.0 and record["sb3_zoo"]["minutes"] == 8.0
    assert (record["ours"]["at_env_steps"], record["ours"]["env_steps"]) == (81920, 2_000_000)
    assert record["minutes_ratio"] == 4.0 and record["target"] == 2925.0


def _counting_runs(monkeypatch) -> list[str]:
    """Fake both sides; the list records every run that was trained."""
    trained: list[str] = []

    def ours(config):
        trained.append("ours")
        return {"evaluations": [[81920, 2950.0, 120.0]], "env_steps": 2_000_000, "steps_per_s": 1900.0}

    def zoo(python, config, eval_every, target):
        trained.append("sb3_zoo")
        return {"evaluations": [[163840, 2930.0, 480.0]], "env_steps": 163840, "steps_per_s": 500.0}

    monkeypatch.setattr(bench_time_to_return, "run_ours", ours)
    monkeypatch.setattr(bench_time_to_return, "run_zoo", zoo)
    return trained


def test_a_finished_run_is_kept_and_taken_again_the_same_day(monkeypatch, tmp_path):
    trained = _counting_runs(monkeypatch)
    args = bench_time_to_return.build_parser().parse_args(["--tasks", "cheetah", "--results", str(tmp_path)])
    first = bench_time_to_return.measure("cheetah", args, None)
    assert trained == ["ours", "sb3_zoo"]
    kept = json.loads((tmp_path / "cheetah-seed0" / "sb3_zoo.json").read_text())
    assert kept["day"] == bench_time_to_return.today() and kept["trained"]["target"] == 2925.0
    assert kept["trained"]["setting"]["env_id"] == "HalfCheetahBulletEnv-v0"
    again = bench_time_to_return.measure("cheetah", args, None)
    assert trained == ["ours", "sb3_zoo"]  # nothing trained the second time
    assert again == first and again["minutes_ratio"] == 4.0


def test_a_run_kept_on_another_day_or_with_other_settings_is_trained_again_and_set_aside(monkeypatch, tmp_path):
    trained = _counting_runs(monkeypatch)
    args = bench_time_to_return.build_parser().parse_args(["--tasks", "hopper", "--results", str(tmp_path)])
    bench_time_to_return.measure("hopper", args, None)
    ours = tmp_path / "hopper-seed0" / "ours.json"
    old = json.loads(ours.read_text())
    ours.write_text(json.dumps({**old, "day": "2026-01-02"}))
    bench_time_to_return.measure("hopper", args, None)
    assert trained == ["ours", "sb3_zoo", "ours"]  # SB3's run is today's and the same: kept
    assert json.loads((tmp_path / "hopper-seed0" / "ours.2026-01-02.json").read_text())["day"] == "2026-01-02"
    other = bench_time_to_return.build_parser().parse_args(["--results", str(tmp_path), "--eval-every", "40960"])
    bench_time_to_return.measure("hopper", other, None)
    assert trained == ["ours", "sb3_zoo", "ours", "ours", "sb3_zoo"]
    today = bench_time_to_return.today()
    assert {path.name for path in (tmp_path / "hopper-seed0").iterdir()} == {
        "ours.json",
        "sb3_zoo.json",
        "ours.2026-01-02.json",
        f"ours.{today}.json",
        f"sb3_zoo.{today}.json",
    }


def test_a_damaged_kept_run_is_named_not_overwritten(monkeypatch, tmp_path):
    _counting_runs(monkeypatch)
    damaged = tmp_path / "walker-seed0" / "ours.json"
    damaged.parent.mkdir()
    damaged.write_text("{not json")
    args = bench_time_to_return.build_parser().parse_args(["--tasks", "walker", "--results", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"walker-seed0/ours\.json: not a kept run"):
        bench_time_to_return.measure("walker", args, None)
    assert damaged.read_text() == "{not json"


def test_a_variant_is_timed_on_our_side_against_the_days_sb3_run(monkeypatch, tmp_path):
    trained = _counting_runs(monkeypatch)
    configs = []
    ours = bench_time_to_return.run_ours
    monkeypatch.setattr(bench_time_to_return, "run_ours", lambda config: configs.append(config) or ours(config))
    plain = bench_time_to_return.arguments(["--tasks", "cheetah", "--results", str(tmp_path)])
    bench_time_to_return.measure("cheetah", plain, None)
    variant = ["--set", "plain_init=pytorch", "--set", "observation_statistics=step"]
    args = bench_time_to_return.arguments(["--tasks", "cheetah", "--results", str(tmp_path), *variant])
    record = bench_time_to_return.measure("cheetah", args, None)
    assert trained == ["ours", "sb3_zoo", "ours"]  # SB3's run of the day serves the variant too
    assert record["variant"] == "observation_statistics=step,plain_init=pytorch"
    assert record["minutes_ratio"] == 4.0
    assert configs[0] == bench_time_to_return.our_config("cheetah", 2_000_000, 81_920, 0)  # the preset itself
    assert (configs[1].plain_init, configs[1].observation_statistics) == ("pytorch", "step")
    assert (configs[1].total_steps, configs[1].seed) == (2_000_000, 0)  # the benchmark's own settings stay
    assert {path.name for path in (tmp_path / "cheetah-seed0").iterdir()} == {
        "ours.json",
        "sb3_zoo.json",
        "ours+observation_statistics=step,plain_init=pytorch.json",
    }
    kept = json.loads((tmp_path / "cheetah-seed0" / "ours.json").read_text())
    assert kept["trained"]["setting"]["plain_init"] == configs[0].plain_init  # the preset's run is not replaced


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "seed=3"], r"--set seed: set by this benchmark itself"),
        (["--set", "no_such_setting=1"], r"no_such_setting"),
        (["--eval-every", "0"], r"--eval-every must be at least 1"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(flags, message):
    with pytest.raises(SystemExit, match=message):
        bench_time_to_return.arguments(["--tasks", "cheetah", *flags])
