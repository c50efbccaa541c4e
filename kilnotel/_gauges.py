"""Observable instruments: jobs by state, oldest available age and the server gauges.

Owns the callbacks the exporter calls on its own thread. They read only memory: the
CountsCache of each source (an observed server, or kiln exporter's database reader) and
a server's in-process state (healthy(), is_leader, pools, stats()); they never query
the database and never block. The database-wide gauges come from every source whose
counts are fresh; the server gauges from observed servers only; the exporter's own
(scheduled due, live servers per queue, paused queues) from the exporter.

One GaugeSet per MeterProvider, since an observable instrument registered twice on a
meter keeps its first callback. Several servers observed through one provider (two
servers in a process) are merged: database counts and ages by ``max`` (each server
reads the same database), running and concurrency and pending results by ``sum``,
healthy by ``min``, leader and heartbeat age by ``max``; table sizes by ``max``.
"""

from __future__ import annotations

import logging
import platform
import weakref
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from kiln import Server, TableSize, __version__
from kilnotel import _names as n
from kilnotel._counts import CountsCache
from kilnotel._installation import Installation
from kilnotel._instruments import Callback, observable, shared

log = logging.getLogger("kilnotel.gauges")
_BUILD = {n.VERSION: __version__, n.PYTHON_VERSION: platform.python_version()}


class QueueState:
    """What kiln exporter reads besides the counts, by queue; each dict is replaced whole
    (the scrape thread reads them)."""

    def __init__(self) -> None:
        self.scheduled_due: dict[str, int] = {}
        self.servers: dict[str, int] = {}  # live servers serving the queue
        self.paused: dict[str, int] = {}  # 1 or 0


class Source:
    """What the gauges report from: a cache of database counts, the installation they
    come from, and, for kiln exporter, the queue state it reads (``queues``)."""

    notifier_up: bool | None = None  # None: no notifier (or not a server)

    def __init__(self, counts: CountsCache, installation: Installation,
                 queues: QueueState | None = None) -> None:
        self.counts = counts
        self.installation = installation
        self.queues = queues

    @property
    def server(self) -> Server | None:
        return None

    def live(self) -> bool:
        return True


class ServerSource(Source):
    """One observed server, as the gauges see it. Holds the server weakly."""

    def __init__(self, server: Server, counts: CountsCache) -> None:
        super().__init__(counts, Installation(server.client))
        self._server = weakref.ref(server)
        self.notifier_up = None
        self.closed = False

    @property
    def server(self) -> Server | None:
        return None if self.closed else self._server()

    def live(self) -> bool:
        return self.server is not None


def _queue_attrs(queue: str, cache: dict[str, dict[str, str]]) -> dict[str, str]:
    attrs = cache.get(queue)
    if attrs is None:
        attrs = cache[queue] = {n.QUEUE: queue}
    return attrs


class GaugeSet:
    def __init__(self, meter: Meter) -> None:
        self._sources: list[Source] = []
        self._attrs: dict[str, dict[str, str]] = {}
        for state, metric in n.JOBS_BY_STATE.items():
            observable(meter, metric, self._state_callback(state))
        observable(meter, n.QUEUE_OLDEST_AVAILABLE_AGE, self._oldest)
        observable(meter, n.KIND_CONFLICTS, self._kind_conflicts)
        observable(meter, n.CONCURRENCY_IN_USE, self._in_use)
        observable(meter, n.JOBS_UNHANDLED, self._unhandled)
        observable(meter, n.COUNTS_AGE, self._counts_age)
        observable(meter, n.COUNTS_REFRESH_FAILURES, self._refresh_failures)
        observable(meter, n.SERVER_HEALTHY, self._scalar(_healthy, min))
        observable(meter, n.SERVER_LEADER, self._scalar(lambda s: int(s.is_leader), max))
        observable(meter, n.SERVER_RESULTS_PENDING,
                   self._scalar(lambda s: s.stats().results_pending, sum))
        # max: servers of one process each count the App's clients (one server a process
        # is the rule)
        observable(meter, n.SERVER_CONNECTIONS, self._scalar(lambda s: s.connections(), max))
        observable(meter, n.SERVER_HEARTBEAT_AGE,
                   self._scalar(lambda s: s.stats().heartbeat_age, max))
        observable(meter, n.SERVER_RUNNING, self._per_queue(lambda s: _pools(s, "running")))
        observable(meter, n.SERVER_CONCURRENCY,
                   self._per_queue(lambda s: _pools(s, "concurrency")))
        observable(meter, n.SERVER_HANDLERS_STUCK, self._per_queue(lambda s: _pools(s, "stuck")))
        observable(meter, n.QUEUE_PAUSED, self._paused)
        observable(meter, n.NOTIFIER_UP, self._notifier)
        observable(meter, n.EVENTS_DROPPED, self._scalar(lambda s: s.events.dropped, sum))
        observable(meter, n.SERVER_RESULTS_FAILING,
                   self._scalar(lambda s: s.stats().results_failing_for, max))
        observable(meter, n.EVENTS_SUBSCRIBER_ERRORS,
                   self._scalar(lambda s: s.events.errors, sum))
        observable(meter, n.SERVER_OLDEST_RUNNING_AGE, self._oldest_running)
        observable(meter, n.BUILD_INFO, self._build_info)
        observable(meter, n.RATE_KEYS_UNDECLARED,
                   self._scalar(lambda s: s.stats().rate_keys_undeclared, max))
        observable(meter, n.RATE_LIMIT_RATE, self._rate_keys(lambda rate, jobs: rate))
        observable(meter, n.RATE_LIMIT_BACKLOG, self._rate_keys(lambda rate, jobs: jobs))
        observable(meter, n.RATE_LIMIT_LAG,
                   self._rate_keys(lambda rate, jobs: None if not rate else jobs / rate))
        observable(meter, n.QUEUE_SCHEDULED_DUE,
                   self._exported(lambda q: q.scheduled_due))
        observable(meter, n.QUEUE_SERVERS, self._exported(lambda q: q.servers))
        self._table_gauges(meter)

    def add(self, source: Source) -> None:
        self._sources = [*self._sources, source]

    def discard(self, source: Source) -> None:
        self._sources = [s for s in self._sources if s is not source]

    def _servers(self) -> Iterator[tuple[Source, Server]]:
        for source in self._sources:
            server = source.server
            if server is not None:
                yield source, server

    def _live(self) -> Iterator[Source]:
        """Every source that may report: observed servers not collected, the exporter."""
        for source in self._sources:
            if source.live():
                yield source

    def _state_callback(self, state: str) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            merged: dict[str, int] = {}
            for source in self._live():
                source.counts.poke_threadsafe()
                for queue, count in source.counts.by_queue(state):
                    merged[queue] = max(merged.get(queue, count), count)
            return [Observation(c, _queue_attrs(q, self._attrs)) for q, c in merged.items()]

        return observe

    def _oldest(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: dict[str, float] = {}
        for source in self._live():
            for queue, age in source.counts.oldest_by_queue():
                merged[queue] = max(merged.get(queue, age), age)
        return [Observation(a, _queue_attrs(q, self._attrs)) for q, a in merged.items()]

    def _kind_conflicts(self, options: CallbackOptions) -> Iterable[Observation]:
        # fresh, like the counts it is read with: a stopped server or one that lost the
        # lease withdraws it rather than pin the max at what it read last
        values = [s.counts.kind_conflicts for s in self._live() if s.counts.fresh()]
        return [Observation(max(values))] if values else []

    def _in_use(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: dict[str, int] = {}
        for source in self._live():
            for group, count in source.counts.in_use_by_group():
                merged[group] = max(merged.get(group, count), count)
        return [Observation(c, {n.KEY_GROUP: g}) for g, c in merged.items()]

    def _rate_keys(self, read: Callable[[float | None, int], float | None]) -> Callback:
        """A kiln.rate_limit.* gauge: the keys most behind, as each source last read
        them (merged by max)."""
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            merged: dict[str, float] = {}
            for source in self._live():
                for key, rate, jobs in source.counts.rate_keys_behind():
                    value = read(rate, jobs)
                    if value is not None:
                        merged[key] = max(merged.get(key, value), value)
            return [Observation(v, {n.RATE_KEY: k}) for k, v in merged.items()]

        return observe

    def _unhandled(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: dict[tuple[str, str], int] = {}
        for source, _server in self._servers():
            for queue, kind, count in source.counts.unhandled_by_kind():
                merged[(queue, kind)] = max(merged.get((queue, kind), count), count)
        return [Observation(c, {n.QUEUE: q, n.KIND: k}) for (q, k), c in merged.items()]

    def _counts_age(self, options: CallbackOptions) -> Iterable[Observation]:
        ages = [a for s in self._live() if (a := s.counts.age()) is not None]
        return [Observation(max(ages))] if ages else []

    def _refresh_failures(self, options: CallbackOptions) -> Iterable[Observation]:
        sources = self._sources  # stopped servers too: a counter never goes back
        return [Observation(sum(s.counts.errors for s in sources))] if sources else []

    def _scalar(
        self, read: Callable[[Server], Any], combine: Callable[[list[float]], float]
    ) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            values: list[float] = []
            for _source, server in self._servers():
                try:
                    value = read(server)
                except Exception:  # a server mid-start or mid-stop: skip it this time
                    log.debug("kilnotel: reading a server gauge failed", exc_info=True)
                    continue
                if value is not None:
                    values.append(float(value))
            return [Observation(combine(values))] if values else []

        return observe

    def _per_queue(self, read: Callable[[Server], dict[str, int]]) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            merged: dict[str, int] = {}
            for _source, server in self._servers():
                for queue, value in read(server).items():
                    merged[queue] = merged.get(queue, 0) + value
            return [Observation(v, _queue_attrs(q, self._attrs)) for q, v in merged.items()]

        return observe

    def _paused(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: dict[str, int] = {}
        for _source, server in self._servers():
            for queue, value in _pools(server, "paused").items():
                merged[queue] = max(merged.get(queue, 0), value)
        for queues in self._exporters():
            for queue, value in queues.paused.items():
                merged[queue] = max(merged.get(queue, 0), value)
        return [Observation(v, _queue_attrs(q, self._attrs)) for q, v in merged.items()]

    def _exporters(self) -> Iterator[QueueState]:
        """The queue state of every exporter source whose reads are fresh."""
        for source in self._live():
            if source.queues is not None and source.counts.fresh():
                yield source.queues

    def _exported(self, read: Callable[[QueueState], dict[str, int]]) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            merged: dict[str, int] = {}
            for queues in self._exporters():
                for queue, value in read(queues).items():
                    merged[queue] = max(merged.get(queue, value), value)
            return [Observation(v, _queue_attrs(q, self._attrs)) for q, v in merged.items()]

        return observe

    def _oldest_running(self, options: CallbackOptions) -> Iterable[Observation]:
        now = datetime.now(UTC)
        merged: dict[str, float] = {}
        for _source, server in self._servers():
            for queue, age in _oldest_running(server, now).items():
                merged[queue] = max(merged.get(queue, age), age)
        return [Observation(a, _queue_attrs(q, self._attrs)) for q, a in merged.items()]

    def _table_gauges(self, meter: Meter) -> None:
        """kiln.table.*: the sizes cache of each publishing server, merged by ``max``."""
        fields: dict[str, Callable[[TableSize], int | None]] = {
            n.TABLE_ROWS_ESTIMATE.name: lambda t: t.rows,
            n.TABLE_DEAD_ROWS.name: lambda t: t.dead_rows,
            n.TABLE_BYTES.name: lambda t: t.bytes,
            n.TABLE_FREE_BYTES.name: lambda t: t.free_bytes,
        }
        for metric in (n.TABLE_ROWS_ESTIMATE, n.TABLE_DEAD_ROWS, n.TABLE_BYTES,
                       n.TABLE_FREE_BYTES):
            observable(meter, metric, self._table_callback(fields[metric.name]))

    def _table_callback(self, read: Callable[[TableSize], int | None]) -> Callback:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            merged: dict[str, int] = {}
            for source in self._live():
                sizes = source.counts.sizes
                if sizes is None or not source.counts.publishing():
                    continue
                for table in sizes.current():
                    value = read(table)
                    if value is not None:
                        merged[table.table] = max(merged.get(table.table, value), value)
            return [Observation(v, {n.TABLE: t}) for t, v in merged.items()]

        return observe

    def _build_info(self, options: CallbackOptions) -> Iterable[Observation]:
        # one series per installation read (a process serves one, as a rule); without the
        # id yet, the bare build info, so the target is known as kiln's from the start
        found: dict[str | None, dict[str, str]] = {}
        for source in self._live():
            installation = source.installation.id
            if installation not in found:
                found[installation] = (_BUILD if installation is None
                                       else {**_BUILD, n.INSTALLATION: installation})
        if len(found) > 1:
            found.pop(None, None)
        return [Observation(1, attrs) for attrs in found.values()]

    def _notifier(self, options: CallbackOptions) -> Iterable[Observation]:
        ups = [s.notifier_up for s, _ in self._servers() if s.notifier_up is not None]
        return [Observation(int(min(ups)))] if ups else []


def _healthy(server: Server) -> int:
    return int(bool(server.healthy()))


def _pools(server: Server, field: str) -> dict[str, int]:
    """Per served queue, one field of its ``QueueStats`` (paused as 0 or 1)."""
    return {q: int(getattr(stats, field)) for q, stats in server.stats().queues.items()}


def _oldest_running(server: Server, now: datetime) -> dict[str, float]:
    """Per served queue, how long its longest-running attempt has run (0 when none)."""
    return {q: max(0.0, (now - stats.oldest_started).total_seconds())
            if stats.oldest_started else 0.0
            for q, stats in server.stats().queues.items()}


def gauge_set(provider: Any, meter: Meter) -> GaugeSet:
    """The GaugeSet of ``provider``, registering its instruments on first use."""
    return shared(provider, "kilnotel.gauges", lambda: GaugeSet(meter))
