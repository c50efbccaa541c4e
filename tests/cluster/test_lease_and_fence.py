"""The elector and the heartbeat against a store that hangs, in one process.

A driver may not give up a cancelled query at once (psycopg waits for the server to
confirm the cancel), so the stub's calls ignore cancellation for as long as they hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import kiln
import kiln.events
from kiln._events import Event, EventHub
from kiln._model._job import ServerInfo
from kiln._server._elector import Elector
from kiln._server._heartbeat import Heartbeater
from kiln._server._identity import Identity
from kiln._server.maintenance import leader_services
from kiln.stores import Store
from tests.support.parts import context
from tests.support.waits import wait_for


class HangingStore:
    """Answers at once until ``hang`` is set; then every call takes ``hang`` seconds
    (or until ``hang`` is cleared), whatever its caller does."""

    def __init__(self) -> None:
        self.hang = 0.0
        self.registered: list[str] = []
        self.beats = 0

    async def _maybe_hang(self) -> None:
        deadline = time.monotonic() + self.hang
        while self.hang and time.monotonic() < deadline:  # the test ends a hang early
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(min(0.05, deadline - time.monotonic()))

    async def leader_elect(self, server_id: str, ttl: float) -> bool:
        await self._maybe_hang()
        return True

    async def leader_resign(self, server_id: str) -> None:
        return None

    async def server_register(self, info: ServerInfo) -> None:
        await self._maybe_hang()
        self.registered.append(info.id)

    async def server_heartbeat(self, server_id: str, connections: int | None = None) -> bool:
        await self._maybe_hang()
        self.beats += 1
        return True


class Probe:
    name = "probe"

    def __init__(self) -> None:
        self.running = False

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False


async def test_leader_gives_up_its_duties_while_the_renewal_hangs() -> None:
    store, probe, events = HangingStore(), Probe(), EventHub()
    seen: list[Event] = []
    events.subscribe(seen.append)
    ttl = 0.9
    elector = Elector(store=store, identity=Identity.named("me"), ttl=ttl,  # type: ignore[arg-type]
                      events=events, services=[probe], may_lead=lambda: True)
    await elector.start()
    try:
        await wait_for(lambda: elector.is_leader and probe.running, 2, "the lead and its duties")
        store.hang = 5.0
        hung_at = time.monotonic()
        await wait_for(lambda: not elector.is_leader, 3, "the lead lost")
        lost_after = time.monotonic() - hung_at
        await wait_for(lambda: not probe.running, 0.1, "its duties stopped")
        # the lease was last renewed before the hang: it runs out within ttl of it
        assert lost_after <= ttl
        assert time.monotonic() - hung_at < 2  # not after the 5 s hang
        changes = [e for e in seen if isinstance(e, kiln.events.LeaderChanged)]
        assert [e.is_leader for e in changes] == [True, False]
    finally:
        store.hang = 0.0
        await elector.stop()


async def test_heartbeat_fences_while_a_beat_hangs_then_rejoins_once() -> None:
    store, events = HangingStore(), EventHub()
    config = kiln.ServerConfig(heartbeat_interval=0.1, kill_grace=0.1, dead_after=6)
    fenced: list[str] = []
    rejoined: list[str] = []

    async def on_fence(reason: str) -> None:
        fenced.append(reason)

    info = ServerInfo(id="first", host="h", pid=1, queues={"q": 1}, kinds=["k"],
                      version="t", started_at=datetime.now(UTC))
    beat = Heartbeater(store=store, identity=Identity(info),  # type: ignore[arg-type]
                       config=config, events=events, on_fence=on_fence,
                       on_rejoin=rejoined.append)
    await beat.register()
    await beat.start()
    try:
        await wait_for(lambda: store.beats >= 2, 2, "two beats")
        assert beat.confirmed
        store.hang = 1.5
        hung_at = time.monotonic()
        # claims stop with the fence
        await wait_for(lambda: not beat.confirmed, 1,
                       "the beat unconfirmed")
        await wait_for(lambda: fenced, 1, "the fence")
        assert time.monotonic() - hung_at <= config.fence_after + 0.3
        assert fenced[0].startswith("no heartbeat confirmed")
        store.hang = 0.0
        await wait_for(lambda: rejoined, 5, "the rejoin")
        assert beat.confirmed and beat.server_id == rejoined[0] != "first"
        await asyncio.sleep(0.5)  # no fence loop after the rejoin
        assert len(fenced) == 1 and len(rejoined) == 1 and beat.confirmed
        assert store.registered == ["first", rejoined[0]]
    finally:
        store.hang = 0.0
        await beat.stop()


async def test_leader_services_keep_the_lifecycle_contract(store: Store) -> None:
    """Stop before start is safe, a second start does not start a second loop, and stop
    ends the loop (twice is safe): each service is one task named after it."""
    schedule = kiln.Recurring(name="r", kind="k", args={}, every=60)
    services = leader_services(context(store, [schedule]))
    assert len(services) == 5  # the rescuer, pruner, sweeper, roller and scheduler

    def loops(service: Any) -> list[asyncio.Task[Any]]:
        name = f"kiln-{service.name}"
        return [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]

    for service in services:
        await service.stop()  # safe before start
        assert loops(service) == []
        await service.start()
        first = loops(service)
        assert len(first) == 1, service
        await service.start()  # idempotent: the same loop
        assert loops(service) == first
        await service.stop()
        assert loops(service) == [] and first[0].done()
        await service.stop()
        assert loops(service) == []


class GatedStore:
    """server_heartbeat and server_register wait for ``gate`` (cancellably)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.registered: list[str] = []
        self.waiting = 0

    async def server_register(self, info: ServerInfo) -> None:
        self.waiting += 1
        await self.gate.wait()
        self.registered.append(info.id)

    async def server_heartbeat(self, server_id: str, connections: int | None = None) -> bool:
        self.waiting += 1
        await self.gate.wait()
        return True


async def test_a_stopped_heartbeat_leaves_no_beat_behind() -> None:
    """Found as a leaked connection pool (tests/cluster/test_stalled_checkpoint.py): the
    heartbeat's stop cancelled its loop but not the beat it waited for, which went on to
    rejoin after the server had closed its store, and so opened it again."""
    store, events = GatedStore(), EventHub()
    config = kiln.ServerConfig(heartbeat_interval=0.1, kill_grace=0.1, dead_after=6)
    rejoined: list[str] = []

    async def on_fence(reason: str) -> None:
        return None

    info = ServerInfo(id="first", host="h", pid=1, queues={"q": 1}, kinds=["k"],
                      version="t", started_at=datetime.now(UTC))
    beat = Heartbeater(store=store, identity=Identity(info),  # type: ignore[arg-type]
                       config=config, events=events, on_fence=on_fence,
                       on_rejoin=rejoined.append)
    await beat.register()
    store.gate.clear()
    await beat.start()
    try:
        await wait_for(lambda: beat.fenced, 2, "the fence")
        waiting = store.waiting
        # a beat out: the rejoin
        await wait_for(lambda: store.waiting > waiting, 2,
                       "a beat waiting")
    finally:
        await beat.stop()
    store.gate.set()
    for _ in range(20):  # a beat left running would now register and rejoin
        await asyncio.sleep(0)
    assert store.registered == ["first"] and rejoined == []
