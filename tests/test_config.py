"""The trainer's configuration (config.py): one documented field per hyperparameter, read in snake_case or
camelCase, derived sizes computed once, and what a resumed run may change."""

import pytest
from pydantic import ValidationError

from agents_operator.config import CHANGEABLE_ON_RESUME, TrainerConfig, camel_name, describe, field_name


def test_settings_changeable_on_resume_are_fields():
    assert CHANGEABLE_ON_RESUME.issubset(TrainerConfig.model_fields)


def test_every_field_is_documented():
    undocumented = [name for name, info in TrainerConfig.model_fields.items() if not (info.description or "").strip()]
    assert undocumented == []


@pytest.mark.parametrize(("key", "field"), [("learningRate", "learning_rate"), ("learning_rate", "learning_rate")])
def test_a_setting_names_its_field_in_either_spelling(key, field):
    assert field_name(key) == field
    assert camel_name(field) == "learningRate"


def test_a_key_that_names_no_field_is_none():
    assert field_name("learning_rat") is None and field_name("LearningRate") is None


def test_the_config_is_frozen_and_reads_camel_case():
    config = TrainerConfig.model_validate({"envsPerWorker": 4, "rolloutSteps": 8, "minibatches": 4})
    assert (config.envs_per_worker, config.rollout_steps) == (4, 8)
    with pytest.raises(ValidationError):
        config.epochs = 9  # type: ignore[misc]


def test_sizes_are_derived_from_the_fields():
    config = TrainerConfig(envs_per_worker=4, rollout_steps=8, minibatches=4, total_steps=100)
    assert (config.batch_size, config.minibatch_size) == (32, 8)


def test_minibatches_must_divide_the_batch():
    with pytest.raises(ValidationError, match=r"minibatches \(3\) must divide envs_per_worker x rollout_steps"):
        TrainerConfig(envs_per_worker=4, rollout_steps=8, minibatches=3)


def test_a_validation_error_is_one_line_naming_each_setting():
    with pytest.raises(ValidationError) as error:
        TrainerConfig.model_validate({"learning_rate": -1, "learning_rat": 0.1})
    line = describe(error.value)
    assert line.startswith("invalid config: ") and "\n" not in line
    assert "learning_rate: Input should be greater than 0 (got -1)" in line
    assert "learning_rat: unknown setting" in line


@pytest.mark.parametrize(("workers", "backups", "aggregated"), [(3, 0, 3), (3, 1, 2), (3, 2, 1)])
def test_a_sync_update_is_the_mean_of_the_workers_less_the_backups(workers, backups, aggregated):
    assert TrainerConfig(backup_workers=backups).aggregated_changes(workers) == aggregated


@pytest.mark.parametrize(("workers", "backups"), [(3, 3), (1, 1), (2, 5)])
def test_backup_workers_must_leave_a_change_to_aggregate(workers, backups):
    with pytest.raises(ValueError, match=rf"backup_workers \({backups}\) must be less than the workers \({workers}\)"):
        TrainerConfig(backup_workers=backups).aggregated_changes(workers)


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"clip_range_floor": 0.1}, r"clip_range_floor \(0.1\) .* needs clip_schedule: linear"),
        (
            {"clip_range": 0.2, "clip_schedule": "linear", "clip_range_floor": 0.3},
            r"clip_range_floor \(0.3\) must not exceed clip_range \(0.2\)",
        ),
        ({"async_clip_range_floor": 0.1}, r"async_clip_range_floor \(0.1\) .* needs clip_schedule: linear"),
        (
            {"clip_range": 0.2, "clip_schedule": "linear", "async_clip_range_floor": 0.3},
            r"async_clip_range_floor \(0.3\) must not exceed clip_range \(0.2\)",
        ),
    ],
)
def test_a_clip_floor_needs_a_linear_schedule_above_it(settings, reason):
    with pytest.raises(ValidationError, match=reason):
        TrainerConfig(**settings)
    assert TrainerConfig(clip_range=0.4, clip_schedule="linear", clip_range_floor=0.2).clip_range_floor == 0.2


def test_the_clip_floor_of_an_async_worker_in_a_cluster_falls_back_to_clip_range_floor():
    both = TrainerConfig(clip_range=0.4, clip_schedule="linear", clip_range_floor=0.1, async_clip_range_floor=0.2)
    assert (both.clip_floor(async_in_cluster=True), both.clip_floor(async_in_cluster=False)) == (0.2, 0.1)
    one = TrainerConfig(clip_range=0.4, clip_schedule="linear", clip_range_floor=0.1)
    assert (one.clip_floor(async_in_cluster=True), one.clip_floor(async_in_cluster=False)) == (0.1, 0.1)
    # 0 is a floor of its own: async workers anneal to zero while the others hold clip_range_floor
    zero = TrainerConfig(clip_range=0.4, clip_schedule="linear", clip_range_floor=0.1, async_clip_range_floor=0)
    assert zero.clip_floor(async_in_cluster=True) == 0.0
