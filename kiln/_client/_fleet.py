"""The client's read API over the fleet: servers, the leader, kinds, rate limits,
queue controls, the audit log, throughput and sizes.

These are what the dashboard, kilnotel and operators' scripts read; they go through
``Client`` like every other operation, so nothing outside the core holds a store
(ADR 0002). Every method is one cheap query on the database's own clock, but for
``unhandled``, which combines three."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kiln._client._unhandled import Unhandled, unhandled
from kiln._model._controls import QueueControls
from kiln._model._job import (
    DEAD_AFTER,
    KIND_COUNT_CAP,
    AuditEntry,
    AuditQuery,
    JobFilter,
    JobState,
    KindCount,
    PublishedKind,
    RateLimit,
    ServerInfo,
    StateCount,
)
from kiln._model._timings import GROUPINGS, TimingRow
from kiln.stores import Store, TableSize
from kiln.stores._filters import ERROR_GROUP_SCAN

__all__ = ["ERROR_GROUP_SCAN", "FleetReads"]


class FleetReads:
    """Reads over one store; ``Client`` inherits them."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # the connection ---------------------------------------------------------------
    async def open(self) -> None:
        """Open the store's connections (a Client made by an App opens itself)."""
        await self._store.open()

    async def close(self) -> None:
        """Close the store's connections."""
        await self._store.close()

    def connections(self) -> int:
        """The database connections this client's store holds open now (from memory)."""
        return self._store.connections()

    async def now(self) -> datetime:
        """The database's clock, which decides every lease, age and window."""
        return await self._store.now()

    # the fleet --------------------------------------------------------------------
    async def servers(self) -> list[ServerInfo]:
        """Every registered server with its last heartbeat, oldest start first."""
        return await self._store.server_list()

    async def leader(self) -> str | None:
        """The id of the server that holds the leader lease, or None."""
        return await self._store.leader_get()

    async def installation(self) -> str | None:
        """The id of this kiln installation (its database, or its schema), made at random
        by ``kiln migrate``; telemetry labels its series with it (kiln_installation)."""
        return await self._store.installation_get()

    async def published_kinds(self) -> list[PublishedKind]:
        """The kinds servers have published, with their options and handlers."""
        return await self._store.kinds_list()

    async def kind_conflicts(self) -> int:
        """How many kinds are declared differently by two services."""
        return await self._store.kind_conflicts()

    async def rate_limits(self) -> list[tuple[str, RateLimit, int]]:
        """(key, limit, pending jobs) for each declared rate-limit key, by key."""
        return await self._store.rate_limit_list()

    async def rate_backlog(
        self, limit: int = 20, *, cap: int | None = None
    ) -> list[tuple[str, RateLimit | None, int]]:
        """(key, limit or None if undeclared, due pending jobs) for the ``limit`` rate
        keys with the most pending jobs due now, most first: the keys behind their rate.
        With ``cap`` (kilnotel passes 100), PostgreSQL counts each key exactly up to
        ``cap`` jobs and estimates beyond, so the read costs the same with a million
        rate-limited jobs waiting as with a thousand; MariaDB and SQLite alike, from their
        sample of ids."""
        return await self._store.rate_keys_backlog(limit, cap=cap)

    async def concurrency_in_use(self) -> dict[str, int]:
        """Running jobs per key group ("kind:NAME", "queue:NAME"), fleet-wide."""
        return await self._store.concurrency_in_use()

    async def queue_controls(self) -> QueueControls:
        """The durable pauses and concurrency overrides every server obeys."""
        return await self._store.queue_controls()

    async def cron_last_slot(self, name: str) -> datetime | None:
        """The last slot the recurring job ``name`` was enqueued for, or None."""
        return await self._store.cron_last_slot(name)

    # the audit log ----------------------------------------------------------------
    async def audit(
        self, limit: int = 50, *, action: str | None = None, actor: str | None = None,
        since: datetime | None = None, until: datetime | None = None,
        before: int | None = None,
    ) -> list[AuditEntry]:
        """The newest ``limit`` entries of the audit log; with ``action`` only that one,
        with ``actor`` only actors containing the text, with ``since``/``until`` only
        entries written in [since, until), with ``before`` only ids below it (the next
        page: the last id of the one before)."""
        query = AuditQuery(action=action, actor=actor, since=since, until=until, before=before)
        return await self._store.audit_list(limit, query)

    async def record_audit(
        self, actor: str, action: str, count: int, detail: dict[str, Any]
    ) -> None:
        """Append one entry to the audit log (who did what to how many jobs)."""
        await self._store.audit_record(actor, action, count, detail)

    # jobs in aggregate ------------------------------------------------------------
    async def counts(
        self, states: Sequence[JobState] | None = None, *, cap: int | None = None
    ) -> list[StateCount]:
        """Jobs by queue and state; with ``states``, only those (each counted through its
        index: cheap for the live states however many finished jobs the table keeps).
        With ``cap`` (the dashboard and kilnotel pass 100), each queue and state is
        counted exactly up to ``cap`` jobs and estimated beyond from a bounded sample,
        marked ``estimated``: the read then costs the same with ten million jobs as
        with a thousand, on every store."""
        return await self._store.job_counts(states, cap=cap)

    async def counts_by_kind(self) -> list[tuple[str, JobState, int]]:
        """Jobs by kind and state."""
        return await self._store.job_counts_by_kind()

    async def kind_counts(self, cap: int = KIND_COUNT_CAP) -> list[KindCount]:
        """Jobs by kind and state, exact up to ``cap`` jobs of a state (PostgreSQL) or
        100 of a kind and state (MariaDB, SQLite) and estimated (marked) above, so it
        costs the same with millions of jobs."""
        return await self._store.job_kind_counts(cap)

    async def unhandled(
        self, dead_after: float = DEAD_AFTER, *, cap: int | None = None
    ) -> list[Unhandled]:
        """Available jobs that no live server handles in their queue, by queue and kind:
        enqueued before their kind was declared, or left in a queue no server of their
        kind serves any more (kiln._client._unhandled). Three reads, as costly as
        ``counts``; with ``cap`` as ``counts(cap=...)``: on PostgreSQL exact up to
        ``cap`` jobs of a queue and kind, estimated above, at a bounded cost."""
        return await unhandled(self._store, dead_after, cap)

    async def running_counts(self) -> list[tuple[str, str, int]]:
        """Running jobs as (queue, server id, count); "" for a job without a server."""
        return await self._store.queue_running_counts()

    async def oldest_available(self) -> dict[str, float]:
        """Per queue, the age in seconds of its oldest job ready to run."""
        return await self._store.queue_oldest_available()

    async def scheduled_due(self) -> dict[str, int]:
        """Per queue, scheduled jobs whose time has come that the releaser has not made
        available yet (normally none for long: it runs every release_interval)."""
        return await self._store.queue_scheduled_due()

    async def throughput(self, since_seconds: float) -> dict[str, int]:
        """Jobs finished in the last ``since_seconds``, by final state."""
        return await self._store.job_throughput(since_seconds)

    async def finished_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, state, jobs) of the jobs that finished (completed, failed,
        cancelled) in the last ``since_seconds``."""
        return await self._store.job_finished_series(since_seconds, bucket_seconds)

    async def error_groups(
        self, filter: JobFilter, limit: int = 50
    ) -> list[tuple[str, int, int]]:
        """(last error message, jobs, highest id) of the failed jobs under ``filter``,
        grouped by the error message of their last attempt, the most common first:
        over the newest ERROR_GROUP_SCAN (10,000) failed jobs (a bounded read);
        ``JobFilter(last_error=message)`` selects one group."""
        return await self._store.job_error_groups(filter, limit)

    async def timings(
        self, since_seconds: float, bucket_seconds: float, by: str = "queue"
    ) -> list[TimingRow]:
        """The completed and failed jobs of the last ``since_seconds`` by queue or kind
        (``by``), time bucket, state, run-time and wait-time class: the histograms the
        dashboard reads percentiles and throughput from (kiln._model._timings)."""
        if by not in GROUPINGS:
            raise ValueError(f"by must be one of {GROUPINGS}, got {by!r}")
        return await self._store.job_timings(since_seconds, bucket_seconds, by)

    async def completed_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[str, int, int]]:
        """(queue, bucket, jobs) of the jobs completed in the last ``since_seconds``."""
        return await self._store.queue_completed_series(since_seconds, bucket_seconds)

    async def dependents(self, job_id: int) -> list[int]:
        """The ids of the jobs that wait on ``job_id``."""
        return await self._store.job_dependents(job_id)

    async def table_sizes(self) -> list[TableSize]:
        """How big each kiln table is, from the database's statistics (no scan)."""
        return await self._store.table_sizes()
