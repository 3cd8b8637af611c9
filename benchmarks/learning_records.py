"""The learning table's finished runs, kept in the repository (`docs/learning/records/`).

A run directory under `runs/` holds checkpoints and event files and stays on the machine that trained it. Its
record (the evaluation curve, the times, the config it trained with and the diagnostics beside the curve) is a
few kilobytes: it is kept in the repository, so that the table is written again, and resumed, on any machine,
from every run that was ever finished with the presets as they are now. A record of an earlier version of a
preset (its config differs) is kept in the file but not counted, and the run is trained again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "learning" / "records"
CONFIG = "config"  # a kept record's key for the config the run trained with (its config.yaml, as a mapping)


def path(records: Path, name: str, seed: int) -> Path:
    """Where the record of seed `seed` of the runs called `name` (a run directory's parent's name) is kept."""
    return records / name / f"seed{seed}.json"


def keep(records: Path, name: str, record: dict[str, Any], logdir: Path) -> Path:
    """Keep `record`, with the config of its run directory `logdir`, under `name`; the file it went to."""
    import yaml

    from agents_operator.trainer import rundir

    config = yaml.safe_load((logdir / rundir.CONFIG_FILE).read_text())
    out = path(records, name, record["seed"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**record, CONFIG: config}, indent=1) + "\n")
    return out


def current(records: Path, name: str, seed: int, config) -> dict[str, Any] | None:
    """The kept record of that run when it trained with `config` (a TrainerConfig); None when there is none,
    or when it trained with another version of the preset."""
    from agents_operator.config import TrainerConfig
    from agents_operator.trainer import rundir

    kept = path(records, name, seed)
    if not kept.is_file():
        return None
    record = json.loads(kept.read_text())
    try:
        rundir.check_resume(TrainerConfig.model_validate(record.pop(CONFIG)), config)
    except (rundir.ConfigConflict, ValueError, KeyError):
        return None
    return record


def seeds(records: Path, name: str) -> list[int]:
    """The seeds with a kept record under `name`, current or not."""
    found = (kept.stem.removeprefix("seed") for kept in (records / name).glob("seed*.json"))
    return sorted(int(seed) for seed in found if seed.isdigit())
