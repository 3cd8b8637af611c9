"""Whether this operator replica serves, for the loops kopf does not pause: resyncs, progress reads, retries.

kopf pauses a replica's watches while its peering object lists a live peer of higher or equal priority, and
resumes them when none is left. The controller's own loops run beside kopf, and a replica that served once
keeps its jobs in its indexes after it pauses: without asking the peering, it went on retrying, resyncing and
writing those jobs' progress next to the replica that took over. So those loops ask `PeeringGate` first,
which reads the same objects kopf reads (a ClusterKopfPeering, or the KopfPeering of the job's namespace) and
applies kopf's rule. Kicks that come from the watches need no asking: kopf delivers them only while serving.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from agents_operator.kube import ApiError, Kube

log = logging.getLogger(__name__)

GROUP_PATH = "/apis/kopf.dev/v1"
CACHE_SECONDS = 2.0
"""How long an answer is kept: kopf's own pause follows its watch of the same object within about that."""
DEFAULT_LIFETIME = 60
"""kopf's peer lifetime (seconds) where a record has none."""


def own_identity() -> str:
    """This replica's peer identity, given to kopf so that the gate knows which record is its own: POD_ID (the
    chart sets it to the pod's name), as kopf would take it; else user@host/start/random, kopf's own form."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    started = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    return f"{getpass.getuser()}@{socket.gethostname()}/{started}/{secrets.token_hex(2)}"


def serves(peers: dict, identity: str, priority: int, now: datetime) -> bool:
    """kopf's rule (kopf/_core/engines/peering.py, process_peering_event): a replica pauses while another live
    peer has a higher or the same priority. A peer is live until its lastseen plus its lifetime."""
    for other, record in (peers or {}).items():
        if other == identity or not isinstance(record, dict):
            continue
        if int(record.get("priority", 0)) >= priority and _alive(record, now):
            return False
    return True


def _alive(record: dict, now: datetime) -> bool:
    try:
        seen = datetime.fromisoformat(str(record["lastseen"]))
    except (KeyError, ValueError):
        return True  # kopf counts a peer without a readable lastseen as seen now
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=UTC)
    return seen + timedelta(seconds=int(record.get("lifetime", DEFAULT_LIFETIME))) > now


class PeeringGate:
    """Asks the peering object(s) whether this replica serves a namespace; answers kept CACHE_SECONDS.

    An object that cannot be read keeps its last answer (serving, before any), with one warning per outage:
    a replica that cannot read its peering is also one whose kopf cannot watch it.
    """

    def __init__(
        self,
        kube: Kube,
        name: str,
        identity: str,
        priority: int,
        clusterwide: bool,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.kube, self.name, self.identity, self.priority = kube, name, identity, priority
        self.clusterwide = clusterwide
        self.clock, self.now = clock, now
        self.answers: dict[str, tuple[float, bool]] = {}
        self.failing: set[str] = set()
        self.reading: dict[str, asyncio.Task] = {}
        """The read in flight per object: a resync kicks every job at once, and they share one GET."""

    def path(self, namespace: str) -> str:
        if self.clusterwide:
            return f"{GROUP_PATH}/clusterkopfpeerings/{self.name}"
        return f"{GROUP_PATH}/namespaces/{namespace}/kopfpeerings/{self.name}"

    async def serves(self, namespace: str) -> bool:
        path = self.path(namespace)
        read_at, answer = self.answers.get(path, (None, True))
        if read_at is not None and self.clock() - read_at < CACHE_SECONDS:
            return answer
        if path not in self.reading:
            self.reading[path] = asyncio.ensure_future(self._read(path, answer))
            self.reading[path].add_done_callback(lambda _: self.reading.pop(path, None))
        return await asyncio.shield(self.reading[path])

    async def _read(self, path: str, answer: bool) -> bool:
        try:
            body = await asyncio.to_thread(self.kube.request, "GET", path)
        except ApiError as err:
            if err.status != 404:  # no object yet: no peer to pause for, as kopf sees it
                return self._unread(path, answer, err)
            body = {}
        except OSError as err:
            return self._unread(path, answer, err)
        self.failing.discard(path)
        answer = serves((body or {}).get("status") or {}, self.identity, self.priority, self.now())
        self.answers[path] = (self.clock(), answer)
        return answer

    def _unread(self, path: str, answer: bool, err: Exception) -> bool:
        self.answers[path] = (self.clock(), answer)  # asked again after CACHE_SECONDS, not at every job
        if path not in self.failing:
            log.warning("peering %s not read (kept: %s): %s", path, "serving" if answer else "paused", err)
            self.failing.add(path)
        return answer
