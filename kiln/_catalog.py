"""KindCatalog: what a producer knows of the kinds it enqueues.

A kind declared here (a handler registered with this App) is resolved from that
declaration without any I/O. Any other kind is resolved from the declarations servers
published (``kiln_kinds``), read in one query and cached: a kind found there is served
from the cache for ``ttl`` seconds; a kind not found triggers a fresh read (a "miss"),
at most once per ``miss_interval`` so that enqueueing an undeclared kind in a loop does
not query on every call. Owns the cache and its refresh rule; never writes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kiln._job import KindDeclaration
from kiln._kinds import Declaration, Kind
from kiln.stores import Store

TTL = 30.0  # seconds a published declaration is served from the cache
MISS_INTERVAL = 1.0  # seconds between reads caused by kinds nobody has published


class KindCatalog:
    def __init__(
        self,
        store: Store,
        local: Mapping[str, Kind] | None = None,
        *,
        ttl: float = TTL,
        miss_interval: float = MISS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._local: Mapping[str, Kind] = local if local is not None else {}  # live: App adds
        self._ttl = ttl
        self._miss_interval = miss_interval
        self._clock = clock
        self._published: dict[str, Declaration] = {}
        self._loaded_at = -float("inf")
        self._alock: asyncio.Lock | None = None
        self._tlock = threading.Lock()
        self.loads = 0  # reads of the published declarations, for tests and benchmarks

    def get(self, kind: str) -> Kind | Declaration | None:
        """The kind's declaration: the local one, else the published one cached."""
        local = self._local.get(kind)
        if local is not None:
            return local
        return self._published.get(kind)

    def stale(self, kinds: Iterable[str]) -> bool:
        """True when resolving ``kinds`` needs a read of the published declarations."""
        age = self._clock() - self._loaded_at
        for kind in kinds:
            if kind in self._local:
                continue
            if kind in self._published:
                if age >= self._ttl:
                    return True
            elif age >= self._miss_interval:
                return True
        return False

    async def ensure(self, kinds: Iterable[str]) -> None:
        """Read the published declarations if resolving ``kinds`` needs it (async)."""
        names = tuple(kinds)
        if not self.stale(names):
            return
        if self._alock is None:
            self._alock = asyncio.Lock()
        async with self._alock:  # concurrent misses share one read
            if self.stale(names):
                self._fill(await self._store.kind_declarations())

    def ensure_sync(self, kinds: Iterable[str]) -> None:
        names = tuple(kinds)
        if not self.stale(names):
            return
        with self._tlock:
            if self.stale(names):
                self._fill(self._store.kind_declarations_sync())

    def _fill(self, published: Iterable[KindDeclaration]) -> None:
        self._published = {item.kind: Declaration.of(item) for item in published}
        self._loaded_at = self._clock()
        self.loads += 1
