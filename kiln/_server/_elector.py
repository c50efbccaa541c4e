"""Elector: holds or seeks the one leader lease, and starts the leader's services.

The lease lasts leader_ttl by the database clock and is renewed every leader_ttl/3.
The holder counts its lease from the moment it sent the renewal (monotonic clock), so
it gives up its duties before the lease can have expired in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence

from kiln._errors import KilnError
from kiln._events import EventHub, LeaderChanged, StoreFailed
from kiln._server._identity import Identity
from kiln._server._service import LoopService, Service
from kiln.stores import Store

log = logging.getLogger("kiln.elector")


class Elector(LoopService):
    name = "elector"

    def __init__(
        self,
        *,
        store: Store,
        identity: Identity,
        ttl: float,
        events: EventHub,
        services: Sequence[Service],
        may_lead: Callable[[], bool],
    ) -> None:
        self._store = store
        self._identity = identity
        self._ttl = ttl
        self._events = events
        self._services = list(services)
        self._may_lead = may_lead
        self._lease_until = 0.0
        self.is_leader = False
        self.leader_since: float | None = None  # monotonic
        self.changes = 0
        self._held_as = ""

    async def stop(self) -> None:
        await super().stop()
        if self.is_leader:
            held = self._held_as
            await self._lose()
            with contextlib.suppress(KilnError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._store.leader_resign(held)

    async def _gain(self) -> None:
        self.is_leader = True
        self._held_as = self._identity.id
        self.leader_since = time.monotonic()
        self.changes += 1
        log.info("server %s became leader", self._held_as)
        self._events.emit(LeaderChanged(server_id=self._held_as, is_leader=True))
        for service in self._services:
            await service.start()

    async def _lose(self) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        self.leader_since = None
        self.changes += 1
        log.info("server %s is no longer leader", self._held_as)
        self._events.emit(LeaderChanged(server_id=self._held_as, is_leader=False))
        # at once and together: one service stuck in a slow store call delays no other
        await asyncio.gather(*(service.stop() for service in self._services))

    async def _attempt(self) -> None:
        sent = time.monotonic()
        try:
            async with asyncio.timeout(self._ttl / 3):
                held = await self._store.leader_elect(self._identity.id, self._ttl)
        except (KilnError, OSError, TimeoutError) as exc:
            self._events.emit(StoreFailed(operation="leader_elect", error=exc))
            return
        if held and time.monotonic() >= sent + self._ttl - self._margin:
            # the answer came too late to act on; the next attempt renews the lease
            log.warning("leader_elect answered after %.1fs: not acting on it",
                        time.monotonic() - sent)
            return
        if held:
            self._lease_until = sent + self._ttl
            if self.is_leader and self._held_as != self._identity.id:
                await self._lose()  # rejoined under a new id: start over
            if not self.is_leader:
                await self._gain()
        elif self.is_leader:
            await self._lose()

    @property
    def _margin(self) -> float:
        return min(1.0, self._ttl / 6)

    async def _expire(self) -> bool:
        """Give up the duties once the lease may have run out in the database."""
        if self.is_leader and time.monotonic() > self._lease_until - self._margin:
            log.warning("server %s could not renew its lease in time", self._held_as)
            await self._lose()
            return True
        return False

    async def _watch(self) -> None:
        """Run one attempt; a store call that hangs must not keep the duties running
        past the lease (a driver may take seconds to give up a cancelled query)."""
        check = min(0.1, self._ttl / 30)
        attempt = asyncio.ensure_future(self._attempt())
        try:
            while not attempt.done():
                await asyncio.wait({attempt}, timeout=check)
                await self._expire()
        finally:
            if not attempt.done():
                attempt.cancel()

    async def _loop(self) -> None:
        renew = self._ttl / 3
        while True:
            if self._may_lead():
                await self._watch()
            elif self.is_leader:
                await self._lose()
            deadline = time.monotonic() + renew * random.uniform(0.8, 1.0)
            while time.monotonic() < deadline:
                await asyncio.sleep(min(0.1, renew / 10))
                # the lease runs out in the database at lease_until at the latest
                if await self._expire():
                    break
