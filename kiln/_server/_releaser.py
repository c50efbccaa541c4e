"""Releaser: makes scheduled jobs available when their run_at comes.

Every server runs one. Without notifications it checks every release_interval
(100 ms). With notifications it sleeps until the next known run_at, which inserts of
delayed jobs announce, and at most poll_interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kiln._events import EventHub
from kiln._server._service import PeriodicService
from kiln.stores import Store


class Releaser(PeriodicService):
    name = "releaser"

    def __init__(
        self,
        *,
        store: Store,
        events: EventHub,
        release_interval: float,
        poll_interval: float,
        notified: Callable[[], bool],
        on_released: Callable[[dict[str, int], str], None],
    ) -> None:
        super().__init__(release_interval, events)
        self._store = store
        self._poll_interval = poll_interval
        self._notified = notified
        self._on_released = on_released
        self._next_at: float | None = None  # monotonic time of the next due job
        # arms that came while a release statement ran: its snapshot may predate the
        # jobs they announce, so its next_at must not replace them
        self._armed_in_pass: float | None = None
        self._in_pass = False

    def arm(self, delay: float) -> None:
        """A job becomes due in ``delay`` seconds: make sure we look then."""
        due = time.monotonic() + max(delay, 0.0)
        if self._in_pass:
            self._armed_in_pass = _earliest(self._armed_in_pass, due)
        if self._next_at is None or due < self._next_at:
            self._next_at = due
            self.wake()

    async def run_once(self) -> dict[str, int]:
        # next_at is counted from the database's now at the start of the statement:
        # count it from when we sent it, or every release comes one round trip late
        sent = time.monotonic()
        self._in_pass, self._armed_in_pass = True, None
        try:
            result = await self._store.jobs_release_due()
        finally:
            self._in_pass = False
        found = None if result.next_at is None else sent + result.next_at
        self._next_at = _earliest(found, self._armed_in_pass)
        if result.released:
            self._on_released(result.released, "scheduled")  # which says JobsReleased
        return {"released": sum(result.released.values())}

    def next_delay(self, counts: dict[str, int]) -> float:
        if not self._notified():
            return self.interval
        if self._next_at is None:
            return self._poll_interval
        return min(max(self._next_at - time.monotonic(), 0.0), self._poll_interval)

    async def _sleep(self, delay: float) -> None:
        """Sleep ``delay``, or less when ``arm`` announces an earlier due job meanwhile,
        or when notifications stop (then the release_interval check starts at once)."""
        deadline = time.monotonic() + delay
        while True:
            await super()._sleep(max(deadline - time.monotonic(), 0.0))
            if not self._notified():
                return
            if self._next_at is not None:
                deadline = min(deadline, self._next_at)
            if time.monotonic() >= deadline:
                return


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
