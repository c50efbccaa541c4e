"""The cache behind the jobs-by-state gauges: store counts, read in the background.

Owns one server's cached ``client.counts()``, ``client.oldest_available()`` and
``client.unhandled()`` and the rule for refreshing them. Observable callbacks run on the
exporter's thread (a Prometheus scrape, a periodic reader): they must never query the
database, so they read only what this cache holds. A refresh is one short task on the
server's own event loop, started when the cache is older than ``ttl`` by the server's
events (claims, heartbeats) or by a scrape; at most one runs at a time, so the database
sees one counts query (plus one oldest-age, one kind-conflicts, one concurrency-in-use
query, the three reads of the unhandled jobs and one grouped read of the rate keys
most behind) per ``ttl``, whatever the number of
scrapes; the table sizes (kilnotel._sizes) ride on the same refresh at their own, slower
pace. It never writes and never touches the server's state.

The counts query of most refreshes asks for the live states only (awaiting, pending,
scheduled, available, running, failed), which the stores count through their indexes:
what it costs follows the jobs waiting and failed, not the completed and cancelled
ones a table keeps for a day (500,000 of them made every refresh a 116 to 195 ms scan
on PostgreSQL). Every ``finished_ttl`` (5 minutes by default) a refresh counts every
state instead, so the completed and cancelled counts lag by up to that. A refresh that
takes longer than ``timeout`` (``max_age`` by default: past it the counts are
withdrawn anyway) is cancelled and counted as a failure.

Counts are exported only while they can be trusted: while the server is alive and
``eligible`` (by default only the leader publishes database-wide gauges, so one worker
per deployment queries them), and only until ``max_age`` has passed since the last
successful refresh. A failed refresh keeps nothing alive past that bound, and a stopped
server, whose process may live on, exports none at all: a stale worker can never pin
the ``max`` that rules and boards take over workers. ``age()`` is what
``kiln.counts.age`` exports, so the staleness itself is visible and alerted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from kiln import Client, JobState, RateLimit
from kilnotel._names import RATE_KEYS_BACKLOG
from kilnotel._sizes import SizesCache

log = logging.getLogger("kilnotel.counts")
LIVE_STATES = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
               JobState.RUNNING, JobState.FAILED)
# exact up to this many jobs of a queue and state, estimated above it (PostgreSQL)
COUNT_CAP = 100
FINISHED_TTL = 300.0  # seconds between two counts of every state (completed, cancelled)
_LIVE_VALUES = frozenset(s.value for s in LIVE_STATES)


class CountsCache:
    def __init__(
        self,
        client: Client,
        ttl: float,
        queues: Iterable[str],
        alive: Callable[[], bool],
        *,
        max_age: float | None = None,
        eligible: Callable[[], bool] = lambda: True,
        sizes: SizesCache | None = None,
        finished_ttl: float = FINISHED_TTL,
        timeout: float | None = None,
        dead_after: float = 60.0,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"counts_ttl must be positive, got {ttl!r}")
        self.max_age = 4 * ttl if max_age is None else max_age
        if not self.max_age >= ttl:
            raise ValueError(f"counts_max_age must be at least counts_ttl, got {max_age!r}")
        if not finished_ttl > 0:
            raise ValueError(f"finished_counts_ttl must be positive, got {finished_ttl!r}")
        self.timeout = self.max_age if timeout is None else timeout
        if not self.timeout > 0:
            raise ValueError(f"counts_timeout must be positive, got {timeout!r}")
        self.finished_ttl = max(finished_ttl, ttl)  # a full count at most every refresh
        self.finished_at = -math.inf  # monotonic: the last count of every state
        self._client = client
        self.ttl = ttl
        self._alive = alive
        self._eligible = eligible
        self._since: float | None = None  # monotonic: when this cache last became eligible
        self.ok_at = -math.inf  # monotonic: the last successful refresh
        # copy-on-write: the scrape thread iterates these while the loop replaces them
        self.known: frozenset[str] = frozenset(queues)
        self.counts: dict[tuple[str, str], int] = {}  # (state, queue) -> jobs
        self.oldest: dict[str, float] = {}  # queue -> seconds
        self.kind_conflicts = 0  # kinds live servers declare differently
        self.in_use: dict[str, int] = {}  # key group -> running limited jobs, zero-filled
        # (queue, kind) -> available jobs no live server handles there, zero-filled
        self.unhandled: dict[tuple[str, str], int] = {}
        # rate key -> (configured jobs per second, None if undeclared; due pending jobs),
        # for the RATE_KEYS_BACKLOG keys with the most
        self.rate_backlog: dict[str, tuple[float | None, int]] = {}
        self._dead_after = dead_after  # the server's: who counts as a live server
        self.loaded = False
        self.refreshed_at = -math.inf  # monotonic
        self.refreshes = 0
        self.errors = 0
        self.timeouts = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sizes = sizes  # table sizes, read by the same refresh at their own pace

    def add_queue(self, queue: str) -> None:
        if queue not in self.known:
            self.known = self.known | {queue}

    @property
    def stale(self) -> bool:
        return time.monotonic() - self.refreshed_at >= self.ttl

    def publishing(self) -> bool:
        """Whether this server should publish the database-wide gauges now (alive, and
        the elected exporter); remembers when that began, for ``age()``."""
        now = self._alive() and self._eligible()
        if not now:
            self._since = None
        elif self._since is None:
            self._since = time.monotonic()
        return now

    def age(self) -> float | None:
        """Seconds since the last successful refresh (or since this server began to
        publish, if later); None while it does not publish."""
        if not self.publishing() or self._since is None:
            return None
        return time.monotonic() - max(self.ok_at, self._since)

    def fresh(self) -> bool:
        """Counts may be exported: publishing, loaded, refreshed within max_age."""
        return (self.loaded and self.publishing()
                and time.monotonic() - self.ok_at <= self.max_age)

    def poke(self) -> None:
        """On the server's loop: start a background refresh if the cache is stale."""
        if self._task is not None or not self.stale or not self.publishing():
            return
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._refresh_once(), name="kilnotel-counts")

    def poke_threadsafe(self) -> None:
        """From any thread (a scrape): ask the server's loop to refresh if stale."""
        loop = self._loop
        if loop is None or self._task is not None or not self.stale or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self.poke)

    async def refresh(self, every: bool | None = None) -> None:
        """Read the counts now (tests and the first scrape). ``every``: count every
        state (True), the live ones (False), or as due (None)."""
        if every is None:
            every = time.monotonic() - self.finished_at >= self.finished_ttl
        # capped: exact up to COUNT_CAP per queue and state, estimated above it (on
        # PostgreSQL), so a refresh costs the same with 10M jobs waiting as with 1,000
        counts = await self._client.counts(None if every else LIVE_STATES, cap=COUNT_CAP)
        oldest = await self._client.oldest_available()
        self.kind_conflicts = await self._client.kind_conflicts()
        in_use = await self._client.concurrency_in_use()  # one grouped count
        waiting = await self._client.unhandled(self._dead_after, cap=COUNT_CAP)
        behind = await self._client.rate_backlog(RATE_KEYS_BACKLOG, cap=COUNT_CAP)
        table = {(c.state.value, c.queue): c.count for c in counts}
        if every:
            self.finished_at = time.monotonic()
        else:  # the completed and cancelled counts of the last full count stand
            table.update((key, n) for key, n in self.counts.items()
                         if key[0] not in _LIVE_VALUES)
        seen = {c.queue for c in counts} | set(oldest)
        if not seen <= self.known:
            self.known = self.known | seen
        self.counts = table
        self.oldest = dict(oldest)
        # a group seen once stays, at 0, so its series does not vanish between jobs
        self.in_use = {**dict.fromkeys(self.in_use, 0), **in_use}
        self.unhandled = {**dict.fromkeys(self.unhandled, 0),
                          **{(u.queue, u.kind): u.jobs for u in waiting}}
        self.rate_backlog = _backlog(behind, self.rate_backlog)
        self.loaded = True
        self.refreshed_at = self.ok_at = time.monotonic()
        self.refreshes += 1
        if self.sizes is not None:
            await self.sizes.refresh_if_due()

    async def _refresh_once(self) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.refresh()
        except TimeoutError:  # a hung query: counted, and tried again after a ttl
            self.errors += 1
            self.timeouts += 1
            self.refreshed_at = time.monotonic()
            log.warning("kilnotel: reading job counts took more than %gs: cancelled",
                        self.timeout)
        except Exception as exc:  # a store error must not escape a background task
            self.errors += 1
            self.refreshed_at = time.monotonic()  # wait a ttl before trying again
            log.warning("kilnotel: reading job counts failed: %s", exc)
        finally:
            self._task = None

    def by_queue(self, state: str) -> list[tuple[str, int]]:
        """Jobs in ``state`` for every known queue, zero-filled; empty unless fresh."""
        if not self.fresh():
            return []
        counts = self.counts
        return [(q, counts.get((state, q), 0)) for q in sorted(self.known)]

    def oldest_by_queue(self) -> list[tuple[str, float]]:
        if not self.fresh():
            return []
        oldest = self.oldest
        return [(q, oldest.get(q, 0.0)) for q in sorted(self.known)]

    def in_use_by_group(self) -> list[tuple[str, int]]:
        """Running limited jobs by key group; empty unless fresh."""
        return sorted(self.in_use.items()) if self.fresh() else []

    def rate_keys_behind(self) -> list[tuple[str, float | None, int]]:
        """(rate key, jobs per second or None, due pending jobs); empty unless fresh."""
        if not self.fresh():
            return []
        return [(k, rate, jobs) for k, (rate, jobs) in sorted(self.rate_backlog.items())]

    def unhandled_by_kind(self) -> list[tuple[str, str, int]]:
        """(queue, kind, jobs) no live server handles; empty unless fresh."""
        if not self.fresh():
            return []
        return [(q, k, n) for (q, k), n in sorted(self.unhandled.items())]


def _backlog(
    rows: list[tuple[str, RateLimit | None, int]], before: dict[str, tuple[float | None, int]]
) -> dict[str, tuple[float | None, int]]:
    """The keys read now; when the read is whole (fewer than its limit), a key listed
    before with jobs is listed once more at 0, so its backlog series ends at 0."""
    now = {key: (None if limit is None else limit.rate / float(limit.per), jobs)
           for key, limit, jobs in rows}
    if len(rows) < RATE_KEYS_BACKLOG:
        now.update((key, (rate, 0)) for key, (rate, jobs) in before.items()
                   if jobs > 0 and key not in now)
    return now
