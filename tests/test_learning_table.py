"""benchmarks/bench_learning_table.py on a tiny budget: it trains what is missing, resumes, and writes its table."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_learning_table as table
from benchmarks import bench_time_to_return

DOC = f"# Doc\n\nbefore\n\n{table.MARKERS[0]}\nstale\n{table.MARKERS[1]}\n\nafter\n"


def _main(capsys, tmp_path, seeds: list[int], *more: str) -> dict:
    args = ["--tasks", "pendulum", "--seeds", *map(str, seeds), "--steps", "2048", "--results", str(tmp_path / "r")]
    args += ["--records", str(tmp_path / "kept"), *more]
    assert table.main([*args, "--doc", str(tmp_path / "doc.md"), "--figures", str(tmp_path / "figures")]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[-1])


def test_it_trains_the_missing_runs_only_and_writes_the_table_and_curves(tmp_path, capsys):
    (tmp_path / "doc.md").write_text(DOC)
    first = _main(capsys, tmp_path, [0, 1])
    assert first["measured"]["trained"] == ["pendulum/0", "pendulum/1"]
    seed0 = table.run_dir(tmp_path / "r", "pendulum", 0, 2048) / table.RESULT
    kept = seed0.read_text()

    second = _main(capsys, tmp_path, [0, 1, 2])
    assert second["measured"]["trained"] == ["pendulum/2"]
    assert seed0.read_text() == kept
    (line,) = second["table"]
    records = [
        json.loads((table.run_dir(tmp_path / "r", "pendulum", s, 2048) / table.RESULT).read_text()) for s in (0, 1, 2)
    ]
    returns = [record["return"] for record in records]
    assert line["seeds"] == [0, 1, 2] and line["worst"] == min(returns)
    assert line["mean"] == pytest.approx(sum(returns) / 3, abs=0.05)
    assert all(record["curve"][-1][0] == 2048 and record["env_steps"] == 2048 for record in records)
    for record in records:  # the diagnostics, at the curve's steps
        assert set(record["diagnostics"]) == set(table.DIAGNOSTICS)
        for tag in ("eval/mean_length", "policy/entropy", "policy/approx_kl"):
            assert [step for step, _ in record["diagnostics"][tag]] == [step for step, _ in record["curve"]], tag

    doc = (tmp_path / "doc.md").read_text()
    assert doc.startswith("# Doc\n\nbefore\n\n") and doc.endswith("\n\nafter\n") and "stale" not in doc
    assert "| pendulum (Pendulum-v1) | -172.2 |" in doc and "| 2,048 |" in doc
    assert "![pendulum](figures/pendulum.png)" in doc
    assert (tmp_path / "figures" / "pendulum.png").read_bytes()[:4] == b"\x89PNG"


def test_an_interrupted_run_continues_from_its_checkpoint_and_its_pieces_add_up(tmp_path, capsys):
    (tmp_path / "doc.md").write_text(DOC)
    _main(capsys, tmp_path, [0])
    logdir = table.run_dir(tmp_path / "r", "pendulum", 0, 2048)
    (logdir / table.RESULT).unlink()  # as if it had been stopped after its last checkpoint
    table.learning_records.path(tmp_path / "kept", "pendulum-2048", 0).unlink()
    assert _main(capsys, tmp_path, [0])["measured"]["trained"] == ["pendulum/0"]
    record = json.loads((logdir / table.RESULT).read_text())
    assert [piece["env_steps"] for piece in record["pieces"]] == [2048, 0]
    training = sum(piece["wall_s"] - piece["evaluation_s"] for piece in record["pieces"])
    assert record["training_minutes"] == round(training / 60, 2)


def test_a_doc_without_the_markers_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "doc.md").write_text("# no block here\n")
    with pytest.raises(SystemExit, match=r"doc\.md: no <!-- learning-table:begin --> \.\.\. "):
        _main(capsys, tmp_path, [0])
    assert (tmp_path / "doc.md").read_text() == "# no block here\n"


def test_every_preset_has_a_reference_and_the_zoo_budgets_are_the_zoos():
    budgets = {table.reference(task).budget for task in ("hopper", "cheetah", "walker", "ant")}
    assert budgets == {2_000_000}
    assert (table.reference("pendulum").budget, table.reference("reacher").budget) == (100_000, 1_000_000)
    targets = {"HalfCheetahBulletEnv-v0": 2925.0, "HopperBulletEnv-v0": 2575.0, "Walker2DBulletEnv-v0": 2110.0}
    assert targets == bench_time_to_return.TARGETS


def test_the_runs_are_evaluated_about_evaluations_times_without_video_or_export():
    config = table.run_config("hopper", 0, 2_000_000)
    assert config.total_steps == 2_000_000 and (config.video_episodes, config.export) == (0, False)
    assert abs(2_000_000 / (config.eval_every * config.batch_size) - table.EVALUATIONS) <= 2
    assert config.eval_episodes == table.presets.resolve("hopper").eval_episodes


def test_a_variant_trains_in_its_own_run_directories_and_leaves_the_doc_alone(tmp_path, capsys):
    (tmp_path / "doc.md").write_text(DOC)
    result = _main(capsys, tmp_path, [0], "--set", "normalize_observations=false")
    assert result["variant"] == "normalize_observations=false"
    logdir = table.run_dir(tmp_path / "r", "pendulum", 0, 2048, {"normalize_observations": False})
    assert logdir.name == "seed0" and logdir.parent.name == "pendulum-2048+normalize_observations=false"
    assert json.loads((logdir / table.RESULT).read_text())["variant"] == {"normalize_observations": False}
    assert "normalize_observations: false" in (logdir / "config.yaml").read_text()
    assert not table.run_dir(tmp_path / "r", "pendulum", 0, 2048).exists()
    assert (tmp_path / "doc.md").read_text() == DOC


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("learning_rat=0.1", r"--set learning_rat: unknown setting \(did you mean learning_rate\?\)"),
        ("epochs=0", "epochs"),
    ],
)
def test_a_bad_variant_is_refused_by_name_before_anything_trains(setting, message, tmp_path, capsys):
    (tmp_path / "doc.md").write_text(DOC)
    with pytest.raises(SystemExit, match=message):
        _main(capsys, tmp_path, [0], "--set", setting)
    assert not (tmp_path / "r").exists()


def _fake_run(results, task: str, seed: int, steps: int, variant: dict, final: float) -> None:
    from agents_operator.trainer import rundir

    logdir = table.run_dir(results, task, seed, steps, variant)
    logdir.mkdir(parents=True)
    rundir.write_config(logdir, table.job_config(task, seed, steps, variant))
    record = {"task": task, "seed": seed, "budget": steps, "env_steps": steps, "variant": variant}
    curve = [[steps // 2, final - 100.0], [steps, final]]
    (logdir / table.RESULT).write_text(
        json.dumps(
            {
                **record,
                "curve": curve,
                "return": final,
                "training_minutes": 2.0,
                "wall_minutes": 3.0,
                "env_steps_per_s": 100.0,
            }
        )
    )


def _report_args(tmp_path):
    paths = {"--results": "r", "--records": "kept", "--doc": "doc.md", "--figures": "figures"}
    return table.build_parser().parse_args([str(part) for o, p in paths.items() for part in (o, tmp_path / p)])


def test_the_doc_holds_every_finished_preset_run_and_its_distributed_runs_but_no_ablation(tmp_path):
    (tmp_path / "doc.md").write_text(DOC)
    results = tmp_path / "r"
    for seed, final in enumerate([2000.0, 2600.0, 3100.0]):
        _fake_run(results, "hopper", seed, 2_000_000, {}, final)
    _fake_run(results, "hopper", 0, 2_000_000, {table.WORKERS: 2}, 2500.0)
    _fake_run(results, "hopper", 0, 2_000_000, {"clip_range": 0.3}, -5.0)
    _fake_run(results, "pendulum", 0, 100_000, {}, -180.0)
    table.write_report(_report_args(tmp_path))
    rows = [line for line in (tmp_path / "doc.md").read_text().splitlines() if line.startswith("| ") and "(" in line]
    assert rows[1:] == [
        "| pendulum (Pendulum-v1) | -172.2 | -180.0 ± 0.0 (1) | -180.0 | 100,000 | 2.0 | 3.0 | 100 |",
        "| hopper (HopperBulletEnv-v0) | 2,575.0 | 2,566.7 ± 449.7 (3) | 2,000.0 | 2,000,000 | 2.0 | 3.0 | 100 |",
        "| hopper (HopperBulletEnv-v0), 1 ps + 2 async workers | 2,575.0 | 2,500.0 ± 0.0 (1) | 2,500.0 | 2,000,000 "
        "| 2.0 | 3.0 | 100 |",
    ]
    assert sorted(path.name for path in (tmp_path / "figures").iterdir()) == ["hopper.png", "pendulum.png"]
    line = table.row(
        "hopper", [json.loads(p.read_text()) for p in sorted(results.glob("hopper-2000000/*/result.json"))]
    )
    assert (line["at_or_above_zoo"], line["worst_at_or_above_floor"]) == (False, False)  # 2,000 < 0.9 * 2,575


def test_a_run_of_an_earlier_preset_is_set_aside_and_trained_again(tmp_path, capsys):
    from agents_operator.trainer import rundir

    (tmp_path / "doc.md").write_text(DOC)
    _main(capsys, tmp_path, [0])
    logdir = table.run_dir(tmp_path / "r", "pendulum", 0, 2048)
    earlier = table.run_config("pendulum", 0, 2048).model_copy(update={"learning_rate": 0.5})
    rundir.write_config(logdir, earlier)  # as if the preset had had another learning rate then
    kept = table.learning_records.path(tmp_path / "kept", "pendulum-2048", 0)
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "config": earlier.model_dump()}))

    assert _main(capsys, tmp_path, [0])["measured"]["trained"] == ["pendulum/0"]
    (stale,) = logdir.parent.glob("seed0.stale-*")
    assert "learning_rate: 0.5" in (stale / "config.yaml").read_text() and (stale / table.RESULT).exists()
    assert rundir.load_config(logdir) == table.run_config("pendulum", 0, 2048)
    assert [record["seed"] for record in table.finished(tmp_path / "r", "pendulum", 2048)] == [0]  # not the stale


def test_a_finished_run_is_kept_in_the_records_and_counts_on_a_machine_without_its_run_directory(tmp_path, capsys):
    import shutil

    (tmp_path / "doc.md").write_text(DOC)
    _main(capsys, tmp_path, [0])
    kept = table.learning_records.path(tmp_path / "kept", "pendulum-2048", 0)
    record = json.loads(kept.read_text())
    assert record["config"]["seed"] == 0 and record["curve"][-1][0] == 2048
    shutil.rmtree(tmp_path / "r")  # another machine: no run directory, only the repository's records

    again = _main(capsys, tmp_path, [0])
    assert again["measured"]["trained"] == [] and again["table"][0]["worst"] == record["return"]
    assert not (tmp_path / "r").exists()
    assert "| pendulum (Pendulum-v1) | -172.2 |" in (tmp_path / "doc.md").read_text()


def test_a_kept_record_of_an_earlier_preset_is_not_counted_and_the_run_is_trained_again(tmp_path, capsys):
    import shutil

    (tmp_path / "doc.md").write_text(DOC)
    _main(capsys, tmp_path, [0])
    shutil.rmtree(tmp_path / "r")
    kept = table.learning_records.path(tmp_path / "kept", "pendulum-2048", 0)
    record = json.loads(kept.read_text())
    kept.write_text(json.dumps({**record, "config": {**record["config"], "learning_rate": 0.5}}))

    assert _main(capsys, tmp_path, [0])["measured"]["trained"] == ["pendulum/0"]
    assert (
        json.loads(kept.read_text())["config"]["learning_rate"] == table.run_config("pendulum", 0, 2048).learning_rate
    )


def test_an_ablation_is_not_kept_in_the_records(tmp_path, capsys):
    (tmp_path / "doc.md").write_text(DOC)
    _main(capsys, tmp_path, [0], "--set", "normalize_observations=false")
    assert not (tmp_path / "kept").exists()


EARLIER_DOC = f"""# Doc

{table.MARKERS[0]}
| preset | zoo PPO | ours: mean ± std (seeds) | worst seed | env steps | training min | wall min | env steps/s |
|---|---|---|---|---|---|---|---|
| pendulum (Pendulum-v1) | -172.2 | -1.0 ± 0.0 (3) | -1.0 | 100,000 | 0.3 | 0.7 | 5 |
| ant (AntBulletEnv-v0) | 2,866.0 | 2,778.6 ± 276.7 (3) | 2,510.9 | 2,000,000 | 17.2 | 17.5 | 2,028 |

![pendulum](figures/pendulum.png)
![ant](figures/ant.png)
{table.MARKERS[1]}
"""


def test_the_rows_of_an_earlier_table_stay_marked_until_their_preset_has_runs(tmp_path):
    (tmp_path / "doc.md").write_text(EARLIER_DOC)
    _fake_run(tmp_path / "r", "pendulum", 0, 100_000, {}, -180.0)
    _fake_run(tmp_path / "r", "hopper", 0, 2_000_000, {}, 2600.0)
    table.write_report(_report_args(tmp_path))
    twice = (tmp_path / "doc.md").read_text()
    table.write_report(_report_args(tmp_path))
    doc = (tmp_path / "doc.md").read_text()
    assert doc == twice  # a kept row is marked once
    rows = [line.split(" |")[0] for line in doc.splitlines() if line.startswith("| ") and "(" in line][1:]
    assert rows == [
        "| pendulum (Pendulum-v1)",
        f"| ant{table.EARLIER} (AntBulletEnv-v0)",  # in the presets' order: by budget, then by name
        "| hopper (HopperBulletEnv-v0)",
    ]
    assert "| -1.0 ± 0.0 (3) |" not in doc and "| 2,778.6 ± 276.7 (3) | 2,510.9 |" in doc
    assert table.EARLIER_NOTE in doc
    links = [line for line in doc.splitlines() if line.startswith("![")]
    assert links == ["![pendulum](figures/pendulum.png)", "![ant](figures/ant.png)", "![hopper](figures/hopper.png)"]
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["hopper-2000000", "pendulum-100000"]


def test_a_variant_of_many_settings_gets_a_directory_name_a_file_system_takes(tmp_path):
    """Walker with fourteen settings made a name of 265 bytes, and the run failed with OSError (File name too long)."""
    many = {
        "activation": "relu",
        "clip_range": 0.4,
        "clip_schedule": "linear",
        "entropy_coef": 0.01,
        "epochs": 20,
        "exploration": "state_dependent",
        "exploration_hold": 4,
        "gae_lambda": 0.9,
        "init_log_std": -2,
        "learning_rate": 3e-05,
        "lr_schedule": "constant",
        "minibatches": 64,
        "orthogonal_init": False,
        "value_coef": 1.0,
    }
    long = table.run_dir(tmp_path, "walker", 1, 2_000_000, many)
    assert len(long.parent.name.encode()) <= table.NAME_LIMIT and long.name == "seed1"
    assert long.parent.name.startswith("walker-2000000+activation=relu,clip_range=0.4,")
    long.mkdir(parents=True)  # the file system takes it
    assert table.run_dir(tmp_path, "walker", 1, 2_000_000, dict(many)) == long  # the same variant, the same place
    other = table.run_dir(tmp_path, "walker", 1, 2_000_000, {**many, "value_coef": 0.5})
    assert other.parent.name[:-13] == long.parent.name[:-13]  # it differs only past the cut:
    assert other.parent != long.parent  # the digest tells them apart
    short = table.run_dir(tmp_path, "walker", 1, 2_000_000, {"entropy_coef": 0.01})
    assert short.parent.name == "walker-2000000+entropy_coef=0.01"  # short names are as they were


def test_diagnostics_are_taken_at_the_curves_steps_from_the_last_point_before():
    points = [(10, 1.0), (20, 2.0), (30, 3.123456)]
    assert table.at_steps(points, [5, 20, 25, 40]) == [[20, 2.0], [25, 2.0], [40, 3.123]]
    assert table.at_steps([], [10]) == []
