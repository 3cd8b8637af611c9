"""How a worker leaves its job: at the end, the chief last, saving the final state once the others are gone; or
before the end, on SIGTERM (the job was scaled down past it, or its pod is stopping)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from agents_operator import naming
from agents_operator.trainer import checkpoints, distributed
from agents_operator.trainer.learner import Learner, LearnerState
from agents_operator.trainer.progress import Progress

EXIT_GRACE_SECONDS = 30.0
"""How long the chief, once no other worker holds a slot, waits for those that gave theirs back to exit, and once
it told the ps tasks the job is over, for them to exit. The job succeeds when the chief does, and
`cleanPodPolicy: Running` then deletes the pods still running: a worker that left a moment before the chief, and
every ps, must have exited (its pod Succeeded, its logs kept) by then."""


class StopRequest:
    """Whether this worker was asked to leave (SIGTERM: the job was scaled down past it, or its pod is stopping).

    A worker other than the chief then ends the iteration in flight, pushes it, gives its slot back and exits
    (`reporting.STOPPED`), so that a scale-down loses no step. The chief keeps SIGTERM's default: it is never
    scaled away, and a chief that restarts keeps the live state.
    """

    def __init__(self) -> None:
        self.requested = False

    @classmethod
    @contextlib.contextmanager
    def on_sigterm(cls, cluster: distributed.Cluster | None) -> Iterator[StopRequest]:
        stop = cls()
        if cluster is None or cluster.is_chief or threading.current_thread() is not threading.main_thread():
            yield stop
            return
        previous = signal.signal(signal.SIGTERM, lambda *_: setattr(stop, "requested", True))
        try:
            yield stop
        finally:
            signal.signal(signal.SIGTERM, previous)


def leave_cluster(cluster: distributed.Cluster, learner: Learner, logdir: Path, progress: Progress) -> LearnerState:
    """End this worker's part in the job; the chief leaves last and saves the final state.

    The chief keeps its session (and, in sync mode, the thread that applies the updates) until every other
    worker has left, having released any that waits for a step that will not come, and those that left have
    exited (`EXIT_GRACE_SECONDS`); then it checkpoints what they all learned, tells the ps tasks that the job is
    over and waits for them to exit too (as long again): the job succeeds when the chief does, and a ps still
    running then would be deleted (cleanPodPolicy Running) rather than end Succeeded with its logs.
    """
    if cluster.is_chief:
        learner.release_waiting()
        distributed.wait_until_gone(lambda: other_members(cluster, learner), progress.note)
        distributed.wait_until_gone(lambda: other_workers(cluster), progress.note, EXIT_GRACE_SECONDS)
    state = learner.state()
    if cluster.is_chief:
        progress.note(f"checkpoint {checkpoints.save(learner, logdir, state.iterations)}")
    learner.finish()
    if cluster.is_chief:  # `finish` told them the job is over
        ps_tasks = cluster.tf_config.cluster[naming.PS]
        distributed.wait_until_gone(lambda: ps_tasks, progress.note, EXIT_GRACE_SECONDS, "parameter server(s) to exit")
    return state


def other_workers(cluster: distributed.Cluster) -> list[str]:
    """Every other worker slot's address: once none is flagged, those that still listen are exiting."""
    own = cluster.tf_config.task_index
    return [address for i, address in enumerate(cluster.tf_config.cluster[naming.WORKER]) if i != own]


def other_members(cluster: distributed.Cluster, learner: Learner) -> list[str]:
    """The addresses of the other workers in the job now; every other slot's while ps 0 (the flags) is lost."""
    own, addresses = cluster.tf_config.task_index, cluster.tf_config.cluster[naming.WORKER]
    try:
        members = learner.membership.members(learner.session)
    except distributed.LOST_CONNECTION:
        members = list(range(len(addresses)))
    return [addresses[i] for i in members if i != own]
