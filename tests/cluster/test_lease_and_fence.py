"""The elector and the heartbeat against a store that hangs, in one process.

A driver may not give up a cancelled query at once (psycopg waits for the server to
confirm the cancel), so the stub's calls ignore cancellation for as long as they hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import kiln
from kiln._events import Event, EventHub
from kiln._job import ServerInfo
from kiln._server._elector import Elector
from kiln._server._heartbeat import Heartbeater
from kiln._server._identity import Identity
from kiln.maintenance import leader_services
from kiln.stores import Store
from tests.cluster.test_maintenance import context


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

    async def server_heartbeat(self, server_id: str) -> bool:
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


async def wait_until(condition: object, timeout: float) -> float:
    began = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - began < timeout, "condition not reached in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - began


async def test_leader_gives_up_its_duties_while_the_renewal_hangs() -> None:
    store, probe, events = HangingStore(), Probe(), EventHub()
    seen: list[Event] = []
    events.subscribe(seen.append)
    ttl = 0.9
    elector = Elector(store, Identity.named("me"), ttl, events, [probe], lambda: True)  # type: ignore[arg-type]
    await elector.start()
    try:
        await wait_until(lambda: elector.is_leader and probe.running, 2)
        store.hang = 5.0
        hung_at = time.monotonic()
        lost_after = await wait_until(lambda: not elector.is_leader, 3)
        await wait_until(lambda: not probe.running, 0.1)
        # the lease was last renewed before the hang: it runs out within ttl of it
        assert lost_after <= ttl
        assert time.monotonic() - hung_at < 2  # not after the 5 s hang
        changes = [e for e in seen if isinstance(e, kiln.LeaderChanged)]
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
    beat = Heartbeater(store, Identity(info), config, events, on_fence,  # type: ignore[arg-type]
                      rejoined.append)
    await beat.register()
    await beat.start()
    try:
        await wait_until(lambda: store.beats >= 2, 2)
        assert beat.confirmed
        store.hang = 1.5
        hung_at = time.monotonic()
        await wait_until(lambda: not beat.confirmed, 1)  # claims stop with the fence
        await wait_until(lambda: fenced, 1)
        assert time.monotonic() - hung_at <= config.fence_after + 0.3
        assert fenced[0].startswith("no heartbeat confirmed")
        store.hang = 0.0
        await wait_until(lambda: rejoined, 5)
        assert beat.confirmed and beat.server_id == rejoined[0] != "first"
        await asyncio.sleep(0.5)  # no fence loop after the rejoin
        assert len(fenced) == 1 and len(rejoined) == 1 and beat.confirmed
        assert store.registered == ["first", rejoined[0]]
    finally:
        store.hang = 0.0
        await beat.stop()


async def test_leader_services_keep_the_lifecycle_contract(store: Store) -> None:
    schedule = kiln.Recurring(name="r", kind="k", args={}, every=60)
    for service in leader_services(context(store, [schedule])):
        await service.stop()  # safe before start
        await service.start()
        await service.start()  # idempotent
        await service.stop()
        await service.stop()


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

    async def server_heartbeat(self, server_id: str) -> bool:
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
    beat = Heartbeater(store, Identity(info), config, events, on_fence,  # type: ignore[arg-type]
                      rejoined.append)
    await beat.register()
    store.gate.clear()
    await beat.start()
    try:
        await wait_until(lambda: beat.fenced, 2)
        waiting = store.waiting
        await wait_until(lambda: store.waiting > waiting, 2)  # a beat out: the rejoin
    finally:
        await beat.stop()
    store.gate.set()
    for _ in range(20):  # a beat left running would now register and rejoin
        await asyncio.sleep(0)
    assert store.registered == ["first"] and rejoined == []
