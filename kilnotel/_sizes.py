"""The cache behind the table-size gauges: ``client.table_sizes()``, read rarely.

Owns one server's cached table sizes and the rule for refreshing them. The read rides
on the counts cache's background refresh (same task, same loop, same publisher: by
default only the leader), but at most once per ``ttl`` (a minute by default): the
sizes move slowly and PostgreSQL's statistics views are not free to read. A failed
read is counted and logged and never fails the counts refresh; sizes older than
``max_age`` are withdrawn, as the counts are.
"""

from __future__ import annotations

import logging
import math
import time

from kiln import Client, TableSize

log = logging.getLogger("kilnotel.sizes")


class SizesCache:
    def __init__(self, client: Client, ttl: float, *, max_age: float | None = None) -> None:
        if not ttl > 0:
            raise ValueError(f"sizes_ttl must be positive, got {ttl!r}")
        self.max_age = 4 * ttl if max_age is None else max_age
        if not self.max_age >= ttl:
            raise ValueError(f"sizes max_age must be at least sizes_ttl, got {max_age!r}")
        self._client = client
        self.ttl = ttl
        self.sizes: tuple[TableSize, ...] = ()  # replaced whole: the scrape thread reads it
        self.tried_at = -math.inf  # monotonic: the last read, successful or not
        self.ok_at = -math.inf  # monotonic: the last successful read
        self.refreshes = 0
        self.errors = 0

    def due(self) -> bool:
        return time.monotonic() - self.tried_at >= self.ttl

    async def refresh_if_due(self) -> None:
        """Read the sizes if ``ttl`` has passed since the last read; never raises."""
        if self.due():
            await self.refresh()

    async def refresh(self) -> None:
        """Read the sizes now (tests, and each ``ttl``); a failure is counted, not raised."""
        self.tried_at = time.monotonic()
        try:
            sizes = await self._client.table_sizes()
        except Exception as exc:  # the counts refresh this rides on must go on
            self.errors += 1
            log.warning("kilnotel: reading table sizes failed: %s", exc)
            return
        self.sizes = tuple(sizes)
        self.ok_at = time.monotonic()
        self.refreshes += 1

    def current(self) -> tuple[TableSize, ...]:
        """The sizes, or nothing once they are older than ``max_age``."""
        if time.monotonic() - self.ok_at > self.max_age:
            return ()
        return self.sizes
