"""KindCatalog: what a producer knows of the kinds it enqueues.

A kind declared here (a handler registered with this App) is resolved from that
declaration without any I/O. Any other kind is resolved from the declarations servers
published (``kiln_kinds``), read in one query and cached: a kind found there is served
from the cache for ``ttl`` seconds; a kind not found triggers a fresh read (a "miss"),
at most once per ``miss_interval`` so that enqueueing an undeclared kind in a loop does
not query on every call. Owns the cache and its refresh rule; never writes.

Each published declaration is read on its own: one this kiln cannot read (a newer
kiln's form of an option, during a rolling upgrade) is logged once and refuses its own
kind only, with the ConfigError naming the kind and the option; every other kind
enqueues as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kiln._errors import ConfigError
from kiln._model._job import KindDeclaration
from kiln._model._kinds import Declaration, Kind
from kiln.stores import Store

log = logging.getLogger("kiln.catalog")

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
        self._unreadable: dict[str, ConfigError] = {}  # kinds whose declaration failed
        self._logged: set[tuple[str, str]] = set()  # (kind, digest) warned about
        self._loaded_at = -float("inf")
        self._alock: asyncio.Lock | None = None
        self._tlock = threading.Lock()
        self.loads = 0  # reads of the published declarations, for tests and benchmarks

    def get(self, kind: str) -> Kind | Declaration | None:
        """The kind's declaration: the local one, else the published one cached. A
        published declaration this kiln cannot read raises its ConfigError."""
        local = self._local.get(kind)
        if local is not None:
            return local
        error = self._unreadable.get(kind)
        if error is not None:
            raise error
        return self._published.get(kind)

    def stale(self, kinds: Iterable[str]) -> bool:
        """True when resolving ``kinds`` needs a read of the published declarations."""
        age = self._clock() - self._loaded_at
        for kind in kinds:
            if kind in self._local:
                continue
            if kind in self._published or kind in self._unreadable:
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
        readable: dict[str, Declaration] = {}
        unreadable: dict[str, ConfigError] = {}
        for item in published:
            try:
                readable[item.kind] = Declaration.of(item)
            except ConfigError as exc:
                unreadable[item.kind] = exc
                if (item.kind, item.digest) not in self._logged:
                    self._logged.add((item.kind, item.digest))
                    log.warning("skipping the published declaration of kind %r: %s",
                                item.kind, exc)
        self._published, self._unreadable = readable, unreadable
        self._loaded_at = self._clock()
        self.loads += 1
