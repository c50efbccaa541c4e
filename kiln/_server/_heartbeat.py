"""Heartbeat: registers the server, reports it alive, and fences it when it cannot.

A server that has not confirmed a heartbeat for fence_after (3 heartbeat intervals)
fences itself: it stops claiming and cancels its running jobs. The rule
dead_after > 3*heartbeat_interval + kill_grace + 5s means this ends before any other
server may consider it dead and rescue those jobs. When the database answers again
the server rejoins under a new registration (a new server id).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from kiln._aio._tasks import stop_task
from kiln._errors import KilnError
from kiln._events import EventHub, Fenced, Heartbeat, StoreFailed
from kiln._server._config import ServerConfig, seconds
from kiln._server._identity import Identity
from kiln._server._service import LoopService
from kiln.stores import Store

log = logging.getLogger("kiln.heartbeat")


class Heartbeater(LoopService):
    name = "heartbeat"

    def __init__(
        self,
        *,
        store: Store,
        identity: Identity,
        config: ServerConfig,
        events: EventHub,
        on_fence: Callable[[str], Awaitable[None]],
        on_rejoin: Callable[[str], None],  # after the identity changed
        connections: Callable[[], int] | None = None,  # the process's, said at each beat
    ) -> None:
        self._store = store
        self._identity = identity
        self._config = config
        self._events = events
        self._on_fence = on_fence
        self._on_rejoin = on_rejoin
        self._connections = connections
        self.last_ok = time.monotonic()
        self.fenced: str | None = None
        self.ok_count = 0
        self.failed_count = 0
        self._beat_task: asyncio.Task[bool] | None = None

    @property
    def server_id(self) -> str:
        return self._identity.id

    @property
    def age(self) -> float:
        return time.monotonic() - self.last_ok

    @property
    def confirmed(self) -> bool:
        """Not fenced, and the last heartbeat is recent enough to act on. Checked at each
        claim, so a server whose event loop stalled past the fence claims nothing before
        the heartbeat loop gets to fence it."""
        return self.fenced is None and self.age <= self._config.fence_after

    async def register(self) -> None:
        sent = time.monotonic()
        await self._store.server_register(self._identity.info)
        self.last_ok = sent

    async def _beat(self) -> bool:
        """One heartbeat, or when fenced one attempt to rejoin; True once confirmed."""
        sent = time.monotonic()
        try:
            async with asyncio.timeout(seconds(self._config.heartbeat_interval)):
                if self.fenced is not None:
                    await self._rejoin()
                    alive = True
                else:
                    held = self._connections() if self._connections is not None else None
                    alive = await self._store.server_heartbeat(self.server_id, held)
        except (KilnError, OSError, TimeoutError) as exc:
            self.failed_count += 1
            self._events.emit(StoreFailed(operation="server_heartbeat", error=exc))
            self._events.emit(Heartbeat(server_id=self.server_id, ok=False, age=self.age))
            return False
        if not alive:  # swept or rescued while we were away: our jobs may run elsewhere
            await self._fence("registration lost")
            return False  # the next beat rejoins
        self.last_ok = sent
        self.ok_count += 1
        self._events.emit(Heartbeat(server_id=self.server_id, ok=True, age=0.0))
        return True

    async def _rejoin(self) -> None:
        """Register under a new id: the old one may be judged dead and its jobs rescued."""
        info = self._identity.renewed()
        await self._store.server_register(info)
        reason, self.fenced = self.fenced, None
        self._identity.rejoined(info)  # the one place the id changes
        log.warning("server rejoined as %s after being fenced (%s)", info.id, reason)
        self._on_rejoin(info.id)

    async def _fence(self, reason: str) -> None:
        if self.fenced is not None:
            return
        self.fenced = reason
        log.error("server %s fenced itself off: %s", self.server_id, reason)
        self._events.emit(Fenced(server_id=self.server_id, reason=reason))
        await self._on_fence(reason)

    async def stop(self) -> None:
        """Stop the loop and the beat it may be waiting for: a beat left running could
        rejoin after the server closed its store, and open it again (a leaked pool)."""
        await super().stop()
        beat, self._beat_task = self._beat_task, None
        with contextlib.suppress(Exception):
            await stop_task(beat)

    async def _loop(self) -> None:
        interval = seconds(self._config.heartbeat_interval)
        check = min(interval / 4, 0.25)
        next_beat = time.monotonic() + interval
        while True:
            await asyncio.sleep(max(min(check, next_beat - time.monotonic()), 0.0))
            if self.fenced is None and self.age > self._config.fence_after:
                await self._fence(f"no heartbeat confirmed for {self.age:.1f}s")
            if time.monotonic() >= next_beat:
                beat = self._beat_task = asyncio.ensure_future(self._beat())
                next_beat = time.monotonic() + interval
                while not beat.done():  # keep watching the fence while the beat hangs
                    await asyncio.wait({beat}, timeout=check)
                    if self.fenced is None and self.age > self._config.fence_after:
                        await self._fence(f"no heartbeat confirmed for {self.age:.1f}s")
