"""Checkpoint directories: written atomically, the last few kept, a broken latest one skipped.

Layout: `<logdir>/checkpoints/ckpt-<iteration, 8 digits>/model.{index,data-*}`. A checkpoint is written
into a temporary directory and renamed into place, so a directory with the final name is complete; a
crash leaves only a `.tmp-*` directory, which the next save removes. Restoring tries the newest
checkpoint first and falls back to older ones when one cannot be read (a corrupt file, a file missing,
a variable whose shape differs from the graph's); every failure is reported with its cause.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol, TypeVar

from agents_operator.trainer import rundir

State = TypeVar("State", covariant=True)


class Checkpointable(Protocol[State]):
    """What checkpoints need of a learner (`learner.Learner`): this module sits below it, which raises
    `CheckpointError`."""

    def save(self, prefix: str) -> None: ...

    def restore(self, prefix: str) -> State: ...


log = logging.getLogger(__name__)


class CheckpointError(Exception):
    """A checkpoint could not be restored; the message names the checkpoint and the cause (a file that
    cannot be read, a variable missing or of another shape than this graph's)."""


KEEP = 3
_PREFIX = "ckpt-"
_MODEL = "model"


def directory(logdir: Path) -> Path:
    return Path(logdir) / rundir.CHECKPOINTS


def list_checkpoints(logdir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = directory(logdir)
    if not root.is_dir():
        return []
    numbered = {}
    for path in root.glob(f"{_PREFIX}*"):
        number = path.name.removeprefix(_PREFIX)
        if number.isdigit() and path.is_dir():
            numbered[int(number)] = path
    return [numbered[i] for i in sorted(numbered)]


def number(path: Path) -> int:
    """The iteration a checkpoint directory of `list_checkpoints` was saved at (`--checkpoint N`)."""
    return int(path.name.removeprefix(_PREFIX))


def restore(learner: Checkpointable[State], path: Path) -> State:
    """Restore the checkpoint directory `path` (one of `list_checkpoints`); CheckpointError when it cannot be."""
    return learner.restore(str(Path(path) / _MODEL))


def save(learner: Checkpointable, logdir: Path, iteration: int) -> Path:
    """Save the learner's variables as checkpoint `iteration` and prune all but the newest KEEP."""
    root = directory(logdir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = root / f"{_PREFIX}{iteration:08d}"
    if final.exists():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    learner.save(str(tmp / _MODEL))
    os.rename(tmp, final)
    for old in list_checkpoints(logdir)[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def restore_latest(learner: Checkpointable[State], logdir: Path) -> tuple[State, Path] | None:
    """Restore the newest readable checkpoint; None when there is none at all.

    A checkpoint that fails to restore is logged and the previous one tried. When every checkpoint
    fails, an error naming each one's cause is raised: starting over silently would discard the run.
    """
    candidates = list_checkpoints(logdir)
    failures: list[str] = []
    for path in reversed(candidates):
        try:
            return restore(learner, path), path
        except CheckpointError as failure:
            log.warning("checkpoint %s cannot be restored (%s); trying the previous one", path, failure)
            failures.append(f"{path.name}: {failure}")
    if failures:
        raise CheckpointError(
            f"none of the {len(candidates)} checkpoints in {directory(logdir)} can be restored: {'; '.join(failures)}"
        )
    return None
