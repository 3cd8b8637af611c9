"""What the controller keeps about each job between reconciles (`JobRecord`), dropped with the job.

`JobMemory` holds the operator's own recent writes, remembered until the watch delivers them, so that a stale
cache neither counts a failure twice nor rewinds the status; and what the job's spec renders to.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agents_operator import reconcile

MEMORY_SECONDS = 60.0
"""How long our own writes may stay unconfirmed by the watch before the cache is believed again."""


@dataclass
class JobMemory:
    """What the operator keeps about one job between reconciles: writes it made that the watch may not have
    delivered yet, and what the job's spec renders to."""

    written_status: dict | None = None
    written_at: float = 0.0
    deleting: set[str] = field(default_factory=set)
    counted: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    desired: reconcile.DesiredCache = field(default_factory=reconcile.DesiredCache)
    pod_events: dict[str, tuple[float, list[dict]]] = field(default_factory=dict)
    """Events of pods that wait with nothing said: pod name -> (time.monotonic() when read, Events)."""


@dataclass
class JobRecord:
    """All the controller keeps about one job."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by a reconcile or a progress write: one at a time per job."""
    memory: JobMemory = field(default_factory=JobMemory)
    dirty: bool = False
    """Kicked since the last reconcile began: run once more."""
    watched: bool = False
    """A watch event was among those kicks: no need to ask the peering whether this replica serves."""
    task: asyncio.Task | None = None
    """The task that reconciles the job while it is dirty."""
    wakeup: asyncio.TimerHandle | None = None
    state: str | None = None
    """The job's status.state as last planned, for the probe and the metrics."""
    users: int = 0
    """Coroutines waiting for or holding `lock`."""
    forgotten: bool = False
    """The job is gone: the record is dropped as soon as nothing uses it."""

    @property
    def busy(self) -> bool:
        return self.users > 0 or (self.task is not None and not self.task.done())


def caught_up(indexed: dict, written: dict) -> bool:
    """Whether the watch has caught up with our status write (progress is written separately, so it is ignored)."""
    strip = {"progress"}
    return {k: v for k, v in indexed.items() if k not in strip} == {k: v for k, v in written.items() if k not in strip}
