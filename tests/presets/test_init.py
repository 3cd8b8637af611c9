"""Named trainer presets (presets/__init__.py): one YAML file per task, each a valid partial TrainerConfig;
overrides in either spelling on top; the data handed out a copy."""

from importlib import resources

import pytest
from pydantic import ValidationError

from agents_operator import presets
from agents_operator.config import TrainerConfig


def test_every_yaml_file_is_a_preset_and_resolves():
    files = sorted(f.name for f in resources.files(presets).iterdir() if f.name.endswith(".yaml"))
    assert [f"{name}.yaml" for name in presets.names()] == files
    assert {"pendulum", "hopper", "cheetah"} <= set(presets.names())
    for name in presets.names():
        assert set(presets.load(name)) <= set(TrainerConfig.model_fields), name
        assert isinstance(presets.resolve(name), TrainerConfig)


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown preset 'walrus' \(known: ant, cheetah, "):
        presets.load("walrus")


def test_overrides_apply_on_top_in_either_spelling():
    base = presets.load("hopper")
    config = presets.resolve("hopper", {"learningRate": 1e-4, "epochs": 3, "max_grad_norm": None})
    assert (config.learning_rate, config.epochs, config.max_grad_norm) == (1e-4, 3, None)
    assert config.env_id == base["env_id"] and config.rollout_steps == base["rollout_steps"]
    assert presets.resolve("hopper") == TrainerConfig.model_validate(base)


def test_an_override_that_names_no_setting_is_refused():
    with pytest.raises(ValidationError, match="learning_rat"):
        presets.resolve("pendulum", {"learning_rat": 0.1})


def test_what_load_hands_out_is_a_copy():
    data = presets.load("cheetah")
    data["env_id"] = "changed"
    data["policy_layers"].append(7)
    assert presets.load("cheetah")["env_id"] != "changed"
    assert presets.load("cheetah")["policy_layers"] == [256, 256] == list(presets.resolve("cheetah").policy_layers)
