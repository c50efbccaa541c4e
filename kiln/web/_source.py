"""Source: the dashboard's only way to the data, through kiln's Client (never a store).

Owns opening (and closing) the client, and the short-lived caches that keep the
expensive aggregates cheap with a million jobs: the per-state counts (capped: exact up
to COUNT_CAP jobs of a queue and state, estimated above it from a bounded sample),
the throughput of the last hour, the series the charts draw and the running jobs per
queue and server are fetched at most once per ``ttl`` seconds, by
one request at a time; others get the previous value meanwhile. Never writes SQL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Generic, TypeVar

from kiln._app import App
from kiln._client._client import Client
from kiln._model._job import COUNT_CAP, JobFilter, JobState, StateCount
from kiln._model._recurring import Recurring
from kiln._model._timings import TimingRow
from kiln.web._series import BUCKET, SPAN, BacklogSamples, Series, per_queue
from kiln.web._timings import Range

T = TypeVar("T")
KIND_COUNTS_TTL = 6  # times the ttl of the other aggregates
MAX_GROUP_FILTERS = 32  # filters whose error groups stay cached
log = logging.getLogger("kiln.web")


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot(Generic[T]):
    """A cached value and when it was read from the store (unix seconds)."""

    value: T
    as_of: float


class Cached(Generic[T]):
    """A value fetched at most once per ``ttl`` seconds, by one caller at a time.

    A value up to ``ttl`` old is served as it is. One up to twice that old is served
    while a background fetch refreshes it, so a page that auto-refreshes does not wait
    for the slow aggregate. An older one (the first page after an idle period) is never
    served: that request waits for a fresh fetch, as do the first one and the first
    after ``invalidate()`` (an action changed the data). Every value carries its age.
    """

    def __init__(self, ttl: float, fetch: Callable[[], Awaitable[T]]) -> None:
        self.ttl = ttl
        self._fetch = fetch
        self._value: T | None = None
        self._at = float("-inf")
        self._as_of = 0.0  # wall clock of the fetch that gave _value
        self._valid = False
        self._generation = 0  # bumped by invalidate(): older fetches are discarded
        self._lock: asyncio.Lock | None = None
        self._refresh: asyncio.Task[None] | None = None

    def invalidate(self) -> None:
        self._valid = False
        self._generation += 1

    def cancel(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()

    async def get(self) -> T:
        return (await self.snapshot()).value

    async def snapshot(self) -> Snapshot[T]:
        """The value with the time it was read, fetching it first when it is too old."""
        age = time.monotonic() - self._at
        if self._value is not None and self._valid and age < 2 * self.ttl:
            if age >= self.ttl and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.get_running_loop().create_task(
                    self._load(), name="kiln-web-refresh"
                )
            return Snapshot(self._value, self._as_of)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            usable = time.monotonic() - self._at < 2 * self.ttl
            if self._value is None or not self._valid or not usable:
                await self._load()
            assert self._value is not None
            return Snapshot(self._value, self._as_of)

    async def _load(self) -> None:
        started, generation, wall = time.monotonic(), self._generation, time.time()
        try:
            value = await self._fetch()
        except Exception:
            if self._refresh is asyncio.current_task():
                log.warning("dashboard: background refresh failed", exc_info=True)
                return  # keep serving the old value; the next request tries again
            raise
        if generation == self._generation:
            self._value, self._at, self._valid, self._as_of = value, started, True, wall


class Estimate(int):
    """A count that is an estimate (some queue of it had more than COUNT_CAP jobs in
    the state): it prints with a leading "~" wherever a page formats it."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return "~" + int.__format__(self, spec)


@dataclasses.dataclass(frozen=True, slots=True)
class Counts:
    """Jobs by queue and state, from one cached read: exact up to COUNT_CAP jobs of a
    queue and state, estimated above it (every store), so it costs the same with ten
    million jobs as with a thousand; an estimated figure is an ``Estimate``."""

    rows: tuple[StateCount, ...]

    def by_state(self, queue: str | None = None) -> dict[JobState, int]:
        totals = dict.fromkeys(JobState, 0)
        estimated: set[JobState] = set()
        for row in self.rows:
            if queue is None or row.queue == queue:
                totals[row.state] += row.count
                if row.estimated:
                    estimated.add(row.state)
        return {s: Estimate(n) if s in estimated else n for s, n in totals.items()}

    @property
    def estimated(self) -> bool:
        """Whether any figure is an estimate (the pages then say what "~" means)."""
        return any(row.estimated for row in self.rows)

    def queues(self) -> list[str]:
        return sorted({row.queue for row in self.rows})

    def table(self) -> dict[str, dict[JobState, int]]:
        return {q: self.by_state(q) for q in self.queues()}


@dataclasses.dataclass(frozen=True, slots=True)
class RecurringView:
    item: Recurring
    last_slot: datetime | None
    next_slot: datetime | None


class Source:
    """The client, opened on first use, plus the cached aggregates."""

    def __init__(self, target: str | App | Client, ttl: float = 5.0) -> None:
        self._app = target if isinstance(target, App) else None
        self._url = target if isinstance(target, str) else None
        self._client = target if isinstance(target, Client) else None
        self._owned: Client | None = None
        self._opened: set[int] = set()
        self._open_lock: asyncio.Lock | None = None
        self.counts = Cached(ttl, self._fetch_counts)
        self.throughput = Cached(ttl, self._fetch_throughput)
        self.oldest = Cached(ttl, self._fetch_oldest)
        self.series = Cached(ttl, self._fetch_series)
        self.queue_series = Cached(ttl, self._fetch_queue_series)  # completed per queue
        self.running = Cached(ttl, self._fetch_running)  # (queue, server, running jobs)
        # a GROUP BY over every job that no index serves: refreshed less often
        self.kind_counts = Cached(ttl * KIND_COUNTS_TTL, self._fetch_kind_counts)
        self.backlog = BacklogSamples()
        self._timings: dict[tuple[str, str], Cached[tuple[TimingRow, ...]]] = {}
        self._groups: dict[JobFilter, Cached[tuple[tuple[str, int, int], ...]]] = {}

    def error_groups(self, f: JobFilter, limit: int) -> Cached[tuple[tuple[str, int, int], ...]]:
        """The Failed tab's error groups under ``f``, cached like the counts (a tab that
        auto-refreshes reads them once per ttl); the MAX_GROUP_FILTERS latest filters."""
        cached = self._groups.pop(f, None)
        if cached is None:
            async def fetch() -> tuple[tuple[str, int, int], ...]:
                return tuple(await (await self.client()).error_groups(f, limit))

            cached = Cached(self.counts.ttl, fetch)
            while len(self._groups) >= MAX_GROUP_FILTERS:
                self._groups.pop(next(iter(self._groups))).cancel()
        self._groups[f] = cached  # the newest last
        return cached

    def timings(self, rng: Range, by: str) -> Cached[tuple[TimingRow, ...]]:
        """The charts page's grouped read for ``rng`` and ``by``, cached for the range's
        own ttl (a 7-day read is made at most every few minutes)."""
        key = (rng.name, by)
        if key not in self._timings:
            async def fetch() -> tuple[TimingRow, ...]:
                client = await self.client()
                return tuple(await client.timings(rng.span, rng.bucket, by))

            self._timings[key] = Cached(max(rng.ttl, self.counts.ttl), fetch)
        return self._timings[key]

    @property
    def recurring(self) -> list[Recurring] | None:
        """The App's recurring jobs; None when the dashboard was given no App."""
        return list(self._app.recurring) if self._app is not None else None

    async def client(self) -> Client:
        if self._app is not None:
            client = self._app.client()
        elif self._client is not None:
            client = self._client
        else:
            if self._owned is None:
                assert self._url is not None
                self._owned = Client.from_url(self._url)
            client = self._owned
        if id(client) not in self._opened:
            if self._open_lock is None:
                self._open_lock = asyncio.Lock()
            async with self._open_lock:
                if id(client) not in self._opened:
                    await client.open()
                    self._opened.add(id(client))
        return client

    async def warm(self) -> None:
        """Load the cached aggregates ahead of the first page (errors are the page's)."""
        try:
            await asyncio.gather(self.counts.get(), self.throughput.get(), self.oldest.get())
        except Exception as exc:
            log.warning("dashboard: could not preload counts: %s", exc)

    async def close(self) -> None:
        """Close the store the dashboard opened itself (an App's or a Client's stay open)."""
        for cached in (self.counts, self.throughput, self.oldest, self.series,
                       self.queue_series, self.running, self.kind_counts):
            cached.cancel()
        for timed in self._timings.values():
            timed.cancel()
        for grouped in self._groups.values():
            grouped.cancel()
        owned, self._owned = self._owned, None
        if owned is not None:
            self._opened.discard(id(owned))
            await owned.close()

    def invalidate(self) -> None:
        """Forget the cached counts after a change made through the dashboard, so the
        next page shows it. Throughput and queue ages follow within ``ttl``."""
        self.counts.invalidate()
        for grouped in self._groups.values():
            grouped.invalidate()

    async def _fetch_counts(self) -> Counts:
        counts = Counts(tuple(await (await self.client()).counts(cap=COUNT_CAP)))
        self.backlog.add(time.time(), counts.by_state()[JobState.AVAILABLE])
        return counts

    async def _fetch_series(self) -> Series:
        client = await self.client()
        rows = await client.finished_series(SPAN, BUCKET)
        return Series.of(rows, self.backlog.snapshot())

    async def _fetch_queue_series(self) -> dict[str, tuple[int, ...]]:
        client = await self.client()
        return per_queue(await client.completed_series(SPAN, BUCKET))

    async def _fetch_running(self) -> tuple[tuple[str, str, int], ...]:
        return tuple(await (await self.client()).running_counts())

    async def _fetch_kind_counts(self) -> dict[str, dict[JobState, int]]:
        client = await self.client()
        table: dict[str, dict[JobState, int]] = {}
        for c in await client.kind_counts():  # exact up to a cap a state (PostgreSQL)
            table.setdefault(c.kind, dict.fromkeys(JobState, 0))[c.state] = (
                Estimate(c.count) if c.estimated else c.count)
        return table

    async def _fetch_throughput(self) -> dict[str, dict[str, int]]:
        client = await self.client()
        hour, five = await asyncio.gather(client.throughput(3600.0),
                                          client.throughput(300.0))
        return {"hour": hour, "five": five}

    async def _fetch_oldest(self) -> dict[str, float]:
        return await (await self.client()).oldest_available()

    async def recurring_views(self) -> list[RecurringView] | None:
        items = self.recurring
        if items is None:
            return None
        client = await self.client()
        now = await client.now()
        views = []
        for item in items:
            last = await client.cron_last_slot(item.name)
            views.append(RecurringView(item, last, item.next_slot_after(now)))
        return views
