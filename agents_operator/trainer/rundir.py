"""The run directory: its layout (`LAYOUT`: config, preset, checkpoints, summaries, logs, video, export), the
files the trainer writes there (`config.yaml`, `preset`, `summary.yaml`) and the check that a run may resume.

`config.yaml` is written at the start of every run and is the reference on resume: on `--resume` the saved
config is the run's config. Settings given again (a preset with `--config`, or `--set`) must agree with it,
except the few in `config.CHANGEABLE_ON_RESUME`, which do not change what an update learns (to train a
finished run for longer, raise `total_steps`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agents_operator import exported
from agents_operator.config import CHANGEABLE_ON_RESUME, TrainerConfig, describe

CONFIG_FILE = "config.yaml"
PRESET_FILE = "preset"
"""The name of the preset the run was started from (one line), when the trainer was given one: `export`
records it."""
VIDEO = "videos/final.gif"
"""Where the chief renders the final policy (`video_episodes`)."""
SUMMARY_FILE = "summary.yaml"
"""The chief's final record of a run that reached its end: the job's env steps and global step once every
worker has left, and this process's last training and evaluation returns."""
CHECKPOINTS = "checkpoints"
EVENTS = "events.out.tfevents.*"
"""TensorBoard's event files (the pattern of their names)."""
LOGS = "logs"
"""Replica logs, written by `agents-operator local` only."""
LAYOUT = (
    CONFIG_FILE,
    PRESET_FILE,
    f"{CHECKPOINTS}/",
    EVENTS,
    SUMMARY_FILE,
    VIDEO,
    f"{exported.DIRECTORY}/",
    f"{LOGS}/",
)
"""Everything a run directory may hold; docs/architecture.md describes each (tests/test_docs.py checks)."""


class ConfigConflict(ValueError):
    """A resumed run was given settings that contradict its saved config; `conflicts` describes each one."""

    def __init__(self, conflicts: list[str]):
        self.conflicts = conflicts
        super().__init__(
            f"--resume: settings differ from the run's {CONFIG_FILE}: {'; '.join(conflicts)}. "
            f"Drop them, or start a new run in another --logdir"
        )


class UnreadableConfig(ValueError):
    """The run's config.yaml is not a config (not YAML, or not valid); the message says why, in one line."""


def load_config(logdir: Path) -> TrainerConfig | None:
    """The run's saved config; None when there is no run; UnreadableConfig when it cannot be read."""
    path = Path(logdir) / CONFIG_FILE
    if not path.exists():
        return None
    try:
        return TrainerConfig.model_validate(yaml.safe_load(path.read_text()) or {})
    except yaml.YAMLError as error:
        raise UnreadableConfig(f"{path}: invalid config: not YAML: {str(error).splitlines()[0]}") from None
    except ValidationError as error:
        raise UnreadableConfig(f"{path}: {describe(error)}") from None


def write_config(logdir: Path, config: TrainerConfig) -> None:
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    _write_atomic(logdir / CONFIG_FILE, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def write_preset(logdir: Path, preset: str) -> None:
    _write_atomic(Path(logdir) / PRESET_FILE, f"{preset}\n")


def load_preset(logdir: Path) -> str | None:
    """The preset the run was started from; None when it was not recorded (or cannot be read)."""
    try:
        return (Path(logdir) / PRESET_FILE).read_text().strip() or None
    except OSError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_summary(logdir: Path, summary: dict[str, float]) -> None:
    _write_atomic(Path(logdir) / SUMMARY_FILE, yaml.safe_dump(summary, sort_keys=False))


FILE_CLOCK_SLACK = 0.1
"""Seconds: a file's time comes from the kernel's coarse clock, up to a tick behind `time.time()`, so a file
written just after a run started may carry an earlier time than the run's start."""


def written_since(path: Path, since: float) -> bool:
    """Whether `path` exists and was last written at or after wall time `since`: by this run, not a previous
    one."""
    try:
        return Path(path).stat().st_mtime >= since - FILE_CLOCK_SLACK
    except OSError:
        return False


def load_summary(logdir: Path, since: float = 0.0) -> dict[str, float] | None:
    """The chief's final record when it was written at or after wall time `since` (an older one is a
    previous run's), else None; a record that cannot be read counts as none."""
    path = Path(logdir) / SUMMARY_FILE
    if not written_since(path, since):
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else None


def check_resume(saved: TrainerConfig, requested: TrainerConfig) -> None:
    """Raise ConfigConflict naming every setting that differs and may not change on resume."""
    conflicts = [
        f"{key} (saved {_show(getattr(saved, key))}, given {_show(getattr(requested, key))})"
        for key in TrainerConfig.model_fields
        if key not in CHANGEABLE_ON_RESUME and getattr(saved, key) != getattr(requested, key)
    ]
    if conflicts:
        raise ConfigConflict(conflicts)


def _show(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
