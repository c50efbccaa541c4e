"""Notifier: the wake-ups of one server, in and out.

Owns the routing of notifications (PostgreSQL's LISTEN, or the Bus for stores without
it) to the parts they concern: a queue's name wakes its pool, a scheduled job arms the
releaser, a cancel pokes the canceller, a controls change wakes the governor, and the
notifier's own state (kiln._model._wakeup.STATE) wakes everything once it is back up,
since what was sent meanwhile may be lost. Owns the other direction too: jobs released
here (``wake``) wake this server's pools, are said once per queue (``JobsReleased``)
and, on a bus, are published to the fleet. A publish that fails is reported
(``StoreFailed(operation="bus_publish")`` and a warning at most every WARN_INTERVAL):
the fleet then finds the jobs within poll_interval, which nobody should have to guess.

It claims, releases and writes nothing, and starts no part: the server does, and hands
it the parts to wake as it builds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from kiln._client._bus import Bus
from kiln._events import EventHub, JobsReleased, NotifierChanged, StoreFailed
from kiln._model._wakeup import STATE, WakeupKind, parse
from kiln._server._canceller import Canceller
from kiln._server._governor import Governor
from kiln._server._pool import Pool
from kiln._server._releaser import Releaser
from kiln.stores import Store

log = logging.getLogger("kiln.notifier")
# a bus that is down fails every publish: one warning a minute says so, the events count
WARN_INTERVAL = 60.0


class Notifier:
    """Routes the wake-ups of one server (see the module docstring).

    ``pools`` is the server's own mapping, read at each wake-up: pools added later are
    woken too. ``releaser``, ``governor`` and ``canceller`` are set once built.
    """

    def __init__(
        self,
        *,
        store: Store,
        events: EventHub,
        bus: Bus | None,
        pools: Mapping[str, Pool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._events = events
        self._bus = bus
        self._pools = pools
        self._clock = clock
        self.releaser: Releaser | None = None
        self.governor: Governor | None = None
        self.canceller: Canceller | None = None
        self._publishing: set[asyncio.Future[None]] = set()  # held, or they may vanish
        self._warned_at: float | None = None
        self._unwarned = 0  # failures since the last warning

    @property
    def _listens(self) -> bool:
        return self._store.capabilities.listen_notify

    def notified(self) -> bool:
        """Whether notifications reach this server now (else it polls)."""
        if self._bus is not None and self._bus.connected():
            return True
        return self._listens and self._store.listening()

    async def start(self) -> None:
        """Listen on the store (PostgreSQL) and on the Bus, whichever there are: an App
        with a Bus builds stores that neither send NOTIFY nor LISTEN, but a store made
        apart (``Server(store, bus=...)``) may still do both."""
        if self._listens:
            await self._store.listen(self.on_notification)
            self._events.emit(NotifierChanged(up=self._store.listening(), source="listen"))
        if self._bus is not None:
            await self._bus.subscribe(self.on_notification)
            self._events.emit(NotifierChanged(up=self._bus.connected(), source=self._bus.name))

    async def stop(self) -> None:
        """Stop listening on the bus (the store's LISTEN ends when the store closes)."""
        if self._bus is not None:
            with contextlib.suppress(Exception):
                await self._bus.unsubscribe(self.on_notification)

    # out: jobs became available here ----------------------------------------------
    def wake(self, released: dict[str, int], reason: str) -> None:
        """Jobs became available (``reason`` as in ``JobsReleased``): wake this server's
        pools, say so once per queue, and wake the fleet through the bus."""
        for queue, count in released.items():
            pool = self._pools.get(queue)
            if pool is not None:
                pool.wake()
            if self._events.active:
                self._events.emit(JobsReleased(queue=queue, count=count, reason=reason))
        if self._bus is not None:
            for queue in released:
                self._publish(self._bus, queue)

    def wake_limited(self) -> None:
        """Results were written: a limited pool may find a key's slot free now."""
        for pool in self._pools.values():
            if pool.limited:
                pool.wake()

    def scheduled(self, delay: float) -> None:
        """A job becomes due in ``delay`` seconds (a retry, a snooze): the releaser looks then."""
        if self.releaser is not None:
            self.releaser.arm(delay)

    def _publish(self, bus: Bus, queue: str) -> None:
        task = asyncio.ensure_future(bus.publish(queue))
        self._publishing.add(task)
        task.add_done_callback(self._published)

    def _published(self, task: asyncio.Future[None]) -> None:
        self._publishing.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        self._events.emit(StoreFailed(operation="bus_publish", error=error))
        self._unwarned += 1
        now = self._clock()
        if self._warned_at is not None and now - self._warned_at < WARN_INTERVAL:
            return
        log.warning(
            "bus %s could not publish a wake-up (%d failed since the last warning): %s;"
            " other servers find the released jobs within poll_interval",
            getattr(self._bus, "name", "bus"), self._unwarned, error,
        )
        self._warned_at, self._unwarned = now, 0

    # in: notifications ----------------------------------------------------------------
    def on_notification(self, channel: str, payload: str) -> None:
        if channel == STATE:
            self._changed(payload == "up")
            return
        wakeup = parse(payload)
        if wakeup.kind is WakeupKind.CANCEL and self.canceller is not None:
            self.canceller.poke()
        elif wakeup.kind is WakeupKind.CONTROLS and self.governor is not None:
            self.governor.wake()
        elif wakeup.kind is WakeupKind.SCHEDULED and self.releaser is not None:
            self.releaser.arm(wakeup.at - time.time())
        pool = self._pools.get(payload)  # a queue may be named like any payload
        if pool is not None:
            pool.notified()

    def _changed(self, up: bool) -> None:
        """Down: the releaser falls back to its 100 ms check now, not after its sleep.
        Up: wake-ups sent meanwhile may be lost, so every pool and the releaser look."""
        source = "listen" if self._listens else getattr(self._bus, "name", "bus")
        self._events.emit(NotifierChanged(up=up, source=source))
        if self.releaser is not None:
            self.releaser.wake()
        if up and self.governor is not None:
            self.governor.wake()  # a controls notification may have been lost
        if up:
            for pool in self._pools.values():
                pool.wake()
            if self.canceller is not None:  # a cancel may have been missed meanwhile
                self.canceller.poke()
