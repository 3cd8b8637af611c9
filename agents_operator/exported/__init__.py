"""An exported policy's directory: a TensorFlow SavedModel with the file `policy.json` beside it.

`trainer.export` writes it (the trainer's step that builds the SavedModel from its learner), `policy.load`
(`agents_operator.exported.policy`) reads it with TensorFlow and numpy only, and the operator names a
job's in `status.export`: the names, signatures and metadata they share live here. Pure module: the standard
library only, so that the loader imports no trainer and the operator no TensorFlow (this module imports not
its `policy`, which needs TensorFlow).

The SavedModel's signatures, as TensorFlow Serving and `tf.saved_model.load(...).signatures` see them:

    act     observations float32 [n, obs_dim]             -> actions float32 [n, act_dim]
    sample  observations float32 [n, obs_dim], seed int64 -> actions float32 [n, act_dim], log_probs float32 [n]

`act` is the deterministic action (the Gaussian's mean) clipped to the action bounds, exactly as the trainer
evaluates; `sample` draws a ~ N(mean, std^2) from `seed` (the same seed and observations give the same
actions), unclipped as the trainer draws them (its environments clip), with log N(a | mean, std^2). Both
normalise the raw observations with the run's statistics first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

DIRECTORY = "exported"
"""Where the chief writes the final policy, in the run directory."""
METADATA = "policy.json"
SAVED_MODEL = "saved_model.pb"
FORMAT = 1
"""Version of this layout; `read_metadata` refuses any other."""

ACT, SAMPLE = "act", "sample"
OBSERVATIONS, SEED = "observations", "seed"
ACTIONS, LOG_PROBS = "actions", "log_probs"


class ExportError(ValueError):
    """A directory that is not a readable exported policy; the message names the file and the reason."""


@dataclass(frozen=True)
class Evaluation:
    """Deterministic episodes of the exported policy, as the trainer plays them (seeds seed, seed + 1, ...)."""

    episodes: int
    seed: int
    mean_return: float
    returns: list[float]


@dataclass(frozen=True)
class Metadata:
    """What `policy.json` holds: the task, the spaces, where the policy comes from and how it scored."""

    env_id: str
    max_episode_steps: int | None
    observation_shape: list[int]
    action_shape: list[int]
    action_low: list[float]
    action_high: list[float]
    preset: str | None
    """The trainer preset the run was started from; None when the trainer was not told one."""
    checkpoint: str
    global_step: int
    env_steps: int
    evaluation: Evaluation | None
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metadata:
        """The metadata of a parsed `policy.json`; KeyError or TypeError when a field is missing or wrong."""
        known = {f.name for f in fields(cls)}
        values = {key: data[key] for key in known if key != "format"}
        evaluation = values["evaluation"]
        values["evaluation"] = None if evaluation is None else Evaluation(**evaluation)
        return cls(**values, format=data["format"])


def is_export(directory: Path) -> bool:
    """Whether `directory` looks like an exported policy (it has `policy.json`), as opposed to a run."""
    return (Path(directory) / METADATA).is_file()


def read_metadata(directory: Path) -> Metadata:
    """The metadata of the exported policy in `directory`; ExportError says in one line why there is none."""
    directory = Path(directory)
    path = directory / METADATA
    if not directory.is_dir():
        raise ExportError(f"{directory}: no such directory")
    for required in (SAVED_MODEL, METADATA):
        if not (directory / required).is_file():
            raise ExportError(f"{directory}: not an exported policy (no {required})")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ExportError(f"{path}: unreadable: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ExportError(f"{path}: format {found!r}; this version reads format {FORMAT}")
    try:
        return Metadata.from_dict(data)
    except KeyError as error:
        raise ExportError(f"{path}: missing field {error}") from None
    except TypeError as error:
        raise ExportError(f"{path}: {error}") from None
