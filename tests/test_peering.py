"""peering.py: kopf's pause rule read from the peering object, and the controller loops that ask it first (a
replica that served once kept retrying, resyncing and writing progress after it paused)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from agents_operator import peering
from agents_operator.kube import ApiError
from agents_operator.peering import PeeringGate, serves
from tests.test_controller import KEY, controller_for, running_world

NOW = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)


def peer(priority: int, seen_ago: float = 1.0, lifetime: int = 60) -> dict:
    """A record as kopf writes it (Peer.as_dict)."""
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seen_ago)).isoformat()}


@pytest.mark.parametrize(
    ("other", "expected"),
    [
        (peer(20), False),  # a live peer of higher priority serves
        (peer(10), False),  # the same priority: kopf pauses both
        (peer(5), True),
        (peer(20, seen_ago=61), True),  # its lifetime lapsed: dead
        (peer(20, seen_ago=5, lifetime=0), True),  # a peer that left says lifetime 0
        ({"priority": 20}, False),  # no lastseen: kopf counts it as seen now
    ],
)
def test_kopfs_rule_pauses_for_a_live_peer_of_higher_or_the_same_priority(other, expected):
    assert serves({"me": peer(10), "other": other}, "me", 10, NOW) is expected


def test_its_own_record_and_an_empty_object_never_pause_it():
    assert serves({"me": peer(99)}, "me", 10, NOW)
    assert serves({}, "me", 10, NOW)


class FakeKube:
    def __init__(self, answers: list):
        self.answers = answers
        self.paths: list[str] = []

    def request(self, method, path, **_):
        self.paths.append(path)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def gate(kube: FakeKube, clock: list[float], clusterwide: bool = False) -> PeeringGate:
    return PeeringGate(kube, "agents", "me", 10, clusterwide, clock=lambda: clock[0], now=lambda: NOW)  # type: ignore[arg-type]


async def test_the_gate_reads_the_namespaces_object_or_the_clusters_and_keeps_its_answer_a_moment():
    clock = [0.0]
    kube = FakeKube([{"status": {"other": peer(20)}}, {"status": {}}])
    g = gate(kube, clock)
    assert not await g.serves("ns")
    clock[0] += peering.CACHE_SECONDS / 2
    assert not await g.serves("ns")  # kept: one read
    clock[0] += peering.CACHE_SECONDS
    assert await g.serves("ns")  # the other peer left
    assert kube.paths == ["/apis/kopf.dev/v1/namespaces/ns/kopfpeerings/agents"] * 2
    assert gate(kube, clock, clusterwide=True).path("ns") == "/apis/kopf.dev/v1/clusterkopfpeerings/agents"


async def test_no_peering_object_yet_is_no_peer_and_a_failed_read_keeps_the_last_answer(caplog):
    clock = [0.0]
    kube = FakeKube([ApiError(404, "not found")])
    assert await gate(kube, clock).serves("ns")
    kube = FakeKube([{"status": {"other": peer(20)}}, ApiError(503, "unavailable"), OSError("refused")])
    g = gate(kube, clock)
    assert not await g.serves("ns")
    with caplog.at_level(logging.WARNING, logger="agents_operator.peering"):
        for _ in range(3):
            clock[0] += peering.CACHE_SECONDS
            assert not await g.serves("ns")  # still paused: the last answer read
    assert len([r for r in caplog.records if "not read" in r.message]) == 1  # one warning per outage


class Paused:
    """A gate that says what `serving` says, and counts the asking."""

    def __init__(self, serving: bool):
        self.serving = serving
        self.asked = 0

    async def serves(self, namespace: str) -> bool:
        self.asked += 1
        return self.serving


async def test_a_paused_replica_reconciles_on_watch_events_only():
    world = running_world()
    controller, fake = controller_for(world)
    controller.peers = Paused(False)  # type: ignore[assignment]
    controller.kick(KEY, watched=False)  # a retry's wake-up or a resync
    await controller.task(KEY)
    assert fake.plans == [] and controller.peers.asked == 1
    controller.kick(KEY)  # kopf delivered a watch event: it does so only while this replica serves
    await controller.task(KEY)
    assert len(fake.plans) == 1 and controller.peers.asked == 1
    controller.peers.serving = True
    controller.kick(KEY, watched=False)
    await controller.task(KEY)
    assert len(fake.plans) == 2


async def test_a_paused_replica_neither_resyncs_nor_reads_progress(monkeypatch):
    controller, fake = controller_for(running_world())
    controller.peers = Paused(False)  # type: ignore[assignment]
    controller.options.progress_interval = controller.options.resync_interval = 0.01
    read: list = []

    async def fake_read(key):
        read.append(key)

    monkeypatch.setattr(controller, "read_progress", fake_read)
    loops = [asyncio.create_task(controller.progress_loop()), asyncio.create_task(controller.resync_loop())]
    await asyncio.sleep(0.2)
    assert read == [] and fake.plans == [] and controller.peers.asked >= 4
    controller.peers.serving = True
    await asyncio.sleep(0.2)
    for loop in loops:
        loop.cancel()
    await controller.shutdown()
    assert read and fake.plans


def test_the_identity_given_to_kopf_is_the_pods_name(monkeypatch):
    monkeypatch.setenv("POD_ID", "agents-operator-7d9f-abcde")
    assert peering.own_identity() == "agents-operator-7d9f-abcde"
    monkeypatch.delenv("POD_ID")
    assert peering.own_identity() != peering.own_identity()  # outside a pod: unique per start, as kopf makes it


async def test_jobs_that_ask_at_once_share_one_read():
    clock = [0.0]
    kube = FakeKube([{"status": {"other": peer(20)}}])
    g = gate(kube, clock)
    answers = await asyncio.gather(*(g.serves("ns") for _ in range(50)))  # a resync kicks every job at once
    assert answers == [False] * 50 and len(kube.paths) == 1
