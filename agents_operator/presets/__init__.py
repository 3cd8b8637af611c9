"""Named trainer presets: plain YAML data, one documented file per task.

A preset is a partial `TrainerConfig`; overrides (from `spec.trainer` or `--set`) are applied on top and
the resolved config is what every run saves as `config.yaml`.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import yaml

from agents_operator.config import TrainerConfig, field_name


def names() -> list[str]:
    """All preset names, sorted."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def load(name: str) -> dict[str, Any]:
    """The raw data of preset `name`; KeyError names the known presets when it does not exist."""
    if name not in names():
        raise KeyError(f"unknown preset {name!r} (known: {', '.join(names())})")
    return copy.deepcopy(_parse(resources.files(__name__).joinpath(f"{name}.yaml").read_text()))


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> dict[str, Any]:
    """Presets are package data, the same for the life of the process, and parsing one takes longer than the rest
    of `api.parse_job` (which the operator runs on every reconcile): each text is parsed once."""
    return yaml.safe_load(text) or {}


def resolve(name: str, overrides: dict[str, Any] | None = None) -> TrainerConfig:
    """Preset `name` with `overrides` (snake_case or camelCase keys) applied, validated."""
    data = dict(load(name))
    for key, value in (overrides or {}).items():
        field = field_name(key) or key  # unknown: validation reports it as an extra field
        data.pop(field, None)
        data[field] = value
    return TrainerConfig.model_validate(data)
