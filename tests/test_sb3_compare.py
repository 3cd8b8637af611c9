"""The referee's Stable-Baselines3 settings follow the trainer's config (benchmarks/bench_sb3_compare.py; no torch)."""

import json
import math
import sys
from pathlib import Path

import pytest

from agents_operator import presets, topology
from agents_operator.config import TrainerConfig
from benchmarks import bench_sb3_compare

# TrainerConfig properties that `identical` reads, and the fields they are made of.
PROPERTIES = {"minibatch_size": {"envs_per_worker", "rollout_steps", "minibatches"}}


class _Reads:
    """A config that records the names read from it."""

    def __init__(self, config: TrainerConfig):
        self._config = config
        self.names: set[str] = set()

    def __getattr__(self, name: str):
        self.names.add(name)
        return getattr(self._config, name)


def test_every_setting_is_handed_to_sb3_or_said_how_it_is_handled():
    reads = _Reads(presets.resolve("cheetah"))
    bench_sb3_compare.identical(reads)
    handed = set().union(*(PROPERTIES.get(name, {name}) for name in reads.names))
    assert set(bench_sb3_compare.UNMATCHED) <= set(TrainerConfig.model_fields)
    assert set(TrainerConfig.model_fields) - handed - set(bench_sb3_compare.UNMATCHED) == set()


def test_the_identical_setting_follows_the_config():
    changed = {
        "epochs": 3,
        "minibatches": 16,
        "activation": "tanh",
        "learning_rate": 1e-4,
        "lr_schedule": "linear",
        "clip_schedule": "linear",
        "clip_range_floor": 0.1,
        "entropy_coef": 0.02,
        "entropy_schedule": "linear",
        "value_coef": 0.8,
        "max_grad_norm": None,
        "discount": 0.98,
        "clip_observations": 5.0,
        "max_episode_steps": 300,
        "threads": 2,
    }
    config = presets.resolve("cheetah", changed)
    setting = json.loads(json.dumps(bench_sb3_compare.identical(config)))  # as sb3_runner.py reads it
    ppo = setting["ppo"]
    assert (ppo["n_epochs"], ppo["batch_size"], ppo["n_steps"]) == (3, config.batch_size // 16, config.rollout_steps)
    assert (ppo["learning_rate"], setting["lr_schedule"], ppo["gamma"]) == (1e-4, "linear", 0.98)
    assert (ppo["clip_range"], setting["clip_schedule"], setting["clip_range_floor"]) == (
        config.clip_range,
        "linear",
        0.1,
    )
    assert (ppo["ent_coef"], setting["entropy_schedule"]) == (0.02, "linear")
    assert ppo["vf_coef"] == pytest.approx(0.4)  # SB3's value loss is twice the trainer's
    assert ppo["max_grad_norm"] == math.inf
    assert setting["normalize"]["clip_obs"] == 5.0 and setting["normalize"]["gamma"] == 0.98
    assert setting["policy"]["activation"] == "tanh"
    assert setting["policy"]["net_arch"] == {"pi": config.policy_layers, "vf": config.value_layers}
    assert (setting["max_episode_steps"], setting["threads"], setting["n_envs"]) == (300, 2, 16)


def test_both_sb3_settings_train_and_evaluate_as_the_trainer_run_does():
    config = bench_sb3_compare.our_config("pendulum", steps=None, eval_episodes=3, seed=4)
    assert config.total_steps == config.batch_size  # --quick: one update
    assert (config.video_episodes, config.export, config.metrics_port) == (0, False, 0)
    evaluation = {"episodes": 3, "seed": 4 + topology.EVALUATION_SEED_OFFSET}
    for setting in (bench_sb3_compare.identical(config), bench_sb3_compare.zoo(config)):
        assert (setting["env_id"], setting["steps"], setting["seed"]) == ("Pendulum-v1", config.total_steps, 4)
        assert setting["evaluation"] == evaluation


def test_what_sb3_trains_otherwise_is_listed_by_setting():
    plain = presets.resolve("hopper", {"plain_init": "glorot_uniform", "observation_statistics": "rollout"})
    matched = presets.resolve("hopper", {"plain_init": "pytorch", "observation_statistics": "step"})
    assert any("initial weights: the trainer glorot_uniform" in line for line in bench_sb3_compare.differences(plain))
    assert not any("initial weights" in line for line in bench_sb3_compare.differences(matched))
    statistics = [line for line in bench_sb3_compare.differences(matched) if line.startswith("normalisation")]
    assert statistics == [
        "normalisation statistics: VecNormalize updates them every step with every environment's, the trainer "
        "every step too, but each environment process with its own environments' observations"
    ]
    assert "once per rollout" in " ".join(bench_sb3_compare.differences(plain))


def test_the_kl_penalty_objective_is_refused():
    with pytest.raises(ValueError, match="kl_penalty"):
        bench_sb3_compare.identical(presets.resolve("pendulum", {"objective": "kl_penalty"}))


def test_the_sb3_venv_shares_the_trainers_pins():
    lock = bench_sb3_compare.LOCK.read_text()
    pins = bench_sb3_compare.shared_pins()
    assert [pin.split("==")[0] for pin in pins] == list(bench_sb3_compare.SHARED_WITH_TRAINER)
    assert all(f"\n{pin} " in lock for pin in pins)


def test_each_round_runs_every_setting_with_its_own_seed(monkeypatch):
    """Round i trains every setting with seed + i; the record keeps each round's return and their mean."""
    seen: list[tuple[str, int]] = []

    def fake_run(name: str, seed: int, eval_return: float) -> dict:
        seen.append((name, seed))
        return {"env_steps": 100, "wall_s": 2.0, "sampling_s": 1.0, "update_s": 0.5, "eval_return": eval_return}

    def ours(config):
        if config.overlap:  # faster, and no sampling phase is timed
            return {
                **fake_run("ours_overlap", config.seed, -90.0 * config.seed),
                "wall_s": 1.6,
                "simulation_share": None,
            }
        return {**fake_run("ours", config.seed, -100.0 * config.seed), "simulation_share": 0.9}

    def sb3(python, setting):
        name = "zoo" if setting["threads"] is None else "identical"
        return {**fake_run(name, setting["seed"], -150.0), "torch_threads": 1, "versions": {}}

    monkeypatch.setattr(bench_sb3_compare, "run_ours", ours)
    monkeypatch.setattr(bench_sb3_compare, "run_sb3", sb3)
    record, _ = bench_sb3_compare.compare(bench_sb3_compare.our_config("pendulum", 1000, 2, seed=5), 3, Path("python"))
    assert seen == [(name, seed) for seed in (5, 6, 7) for name in ("ours", "ours_overlap", "identical", "zoo")]
    assert record["ours"]["eval_returns"] == [-500.0, -600.0, -700.0] and record["ours"]["eval_return"] == -600.0
    assert record["ours"]["simulation_share"] == 0.9
    assert record["ratios"]["sb3_identical"]["eval_return_difference"] == -450.0
    assert "simulation_share" not in record["ours_overlap"]
    assert record["overlap_ratios"]["ours"] == {
        "steps_per_s": 1.25,
        "sampling_steps_per_s": 1.0,
        "update_steps_per_s": 1.0,
        "eval_return_difference": 60.0,
    }


FAKE_RUNNER = """
import json, sys
setting = json.load(sys.stdin)
for step in (1, 2):
    print(json.dumps({"evaluation": [step, 1.0, 0.5]}), file=sys.stderr, flush=True)
if setting.get("fail"):
    print("runner broke: " + setting["fail"], file=sys.stderr)
    sys.exit(3)
print("a line before the report")
print(json.dumps({"eval_returns": [1.0, 3.0], "env_id": setting["env_id"]}))
"""


def test_the_runners_progress_reaches_standard_error_as_it_comes_and_its_report_is_read(monkeypatch, tmp_path, capfd):
    runner = tmp_path / "runner.py"
    runner.write_text(FAKE_RUNNER)
    monkeypatch.setattr(bench_sb3_compare, "RUNNER", runner)
    report = bench_sb3_compare.run_sb3(Path(sys.executable), {"env_id": "Pendulum-v1"})
    assert report == {"eval_returns": [1.0, 3.0], "env_id": "Pendulum-v1", "eval_return": 2.0}
    assert '{"evaluation": [2, 1.0, 0.5]}' in capfd.readouterr().err
    with pytest.raises(RuntimeError, match=r"runner.py exited 3:(.|\n)*runner broke: on purpose"):
        bench_sb3_compare.run_sb3(Path(sys.executable), {"env_id": "Pendulum-v1", "fail": "on purpose"})
