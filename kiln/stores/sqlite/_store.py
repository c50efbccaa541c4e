"""SQLiteStore: the embedded default, safe for several worker processes on one host.

WAL journal, short write transactions taken with BEGIN IMMEDIATE, and a busy
timeout so concurrent processes wait for the write lock instead of failing.
All statements run on one connection in one dedicated thread per store.
The database clock of an embedded database is its host's clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from kiln._errors import NotMigratedError, UnreachableError
from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._controls import QueueControls
from kiln._model._job import (
    DEAD_AFTER,
    AdmitResult,
    AuditEntry,
    AuditQuery,
    CancelRequest,
    JobFilter,
    JobResult,
    JobRow,
    JobState,
    KindCount,
    KindDeclaration,
    NewJob,
    PublishedKind,
    RateLimit,
    RescueCandidate,
    RunningJob,
    ServerInfo,
    StateCount,
)
from kiln.stores import _migrations
from kiln.stores._filters import ERROR_GROUP_SCAN
from kiln.stores._protocol import (
    ApplyResult,
    ReleaseResult,
    TableSize,
)
from kiln.stores._rows import ts_required
from kiln.stores._timings import TimingRow
from kiln.stores._translator import StoreFailure, Translator
from kiln.stores._unnotified import Unnotified
from kiln.stores.sqlite import (
    _admin,
    _adopt,
    _cancel,
    _cluster,
    _concurrency,
    _controls,
    _counts,
    _jobs,
    _kinds,
    _rates,
    _rollup,
    _schema,
    _sizes,
)
from kiln.stores.sqlite._errors import is_driver_error, translate
from kiln.stores.sqlite._plan import joined, write

T = TypeVar("T")


def connect(path: str, *, timeout: float = 30.0, create: bool = False) -> sqlite3.Connection:
    """Open ``path``; only ``create`` (migrations) may bring a new file into being."""
    if not create and path != ":memory:" and not os.path.exists(path):
        raise NotMigratedError(
            "connect", f"SQLite database {path!r} does not exist: run `kiln migrate` first"
        )
    try:
        conn = sqlite3.connect(
            path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise UnreachableError("connect", f"cannot open SQLite database {path!r}: {exc}") from exc
    conn.row_factory = sqlite3.Row
    # SQLite's lower() folds ASCII only; error search folds every letter, as the others do
    conn.create_function("kiln_lower", 1, _lower, deterministic=True)
    _wal(conn, timeout)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    conn.execute("PRAGMA foreign_keys=OFF")
    return conn


def _lower(value: object) -> str | None:
    return value.lower() if isinstance(value, str) else None


def _wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL. The switch needs the file to itself and answers "database is
    locked" without waiting when several processes open a new file at once: retry."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                conn.close()
                raise UnreachableError("connect", f"cannot open SQLite database: {exc}") from exc
            time.sleep(0.01)


class SQLiteStore(Unnotified):
    """A Store over one SQLite file (``sqlite:///path.db``)."""

    database = "SQLite"

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._sync_local = threading.local()
        self._sync_conns: list[sqlite3.Connection] = []  # every thread's, closed by close()
        self._sync_lock = threading.Lock()
        self._queries = 0
        self._errors = Translator(repr(path), is_driver_error, translate)

    def connections(self) -> int:
        with self._sync_lock:
            return int(self._conn is not None) + len(self._sync_conns)

    # lifecycle -----------------------------------------------------------------
    async def open(self, create: bool = False) -> None:
        """Open the file; a missing file stays missing until ``migrate()`` creates it."""
        if self._conn is not None:
            return
        if not create and not os.path.exists(self.path):
            return  # operations raise NotMigratedError; migrate() creates the file
        self._executor = self._executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kiln-sqlite"
        )
        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(
            self._executor,
            lambda: connect(self.path, timeout=self._busy_timeout, create=create),
        )

    async def close(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn = self._executor = None
        with self._sync_lock:
            sync_conns, self._sync_conns = self._sync_conns, []
        self._sync_local = threading.local()
        for own in sync_conns:
            own.close()
        if conn is not None and executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
            executor.shutdown(wait=True)

    async def _run(self, operation: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None or self._executor is None:
            await self.open(create=operation == "migrate")
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise NotMigratedError(
                operation, f"SQLite database {self.path!r} does not exist: run `kiln migrate`"
            )

        def call() -> T:
            self._queries += 1
            with self._errors(operation):
                try:
                    return fn(conn)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

        return await asyncio.get_running_loop().run_in_executor(executor, call)

    def failures(self) -> list[StoreFailure]:
        return self._errors.failures()

    def query_count(self) -> int:
        return self._queries

    async def migrate(self) -> list[int]:
        return await self._run("migrate", _schema.migrate)

    async def schema_check(self) -> None:
        have = await self._run("schema_check", _schema.version)
        _migrations.require(have, _schema.latest(), repr(self.path))

    async def schema_version(self) -> int:
        if self._conn is None and not os.path.exists(self.path):
            return 0  # never migrated, and reading it must not create the file
        return await self._run("schema_version", _schema.version)

    async def now(self) -> datetime:
        return ts_required(time.time())

    # jobs ------------------------------------------------------------------------
    async def job_insert_many(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is not None:
            return self.job_insert_many_sync(jobs, conn)
        return await self._run("job_insert", lambda c: write(c, _jobs.insert, jobs))

    def job_insert_many_sync(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is not None:
            if not isinstance(conn, sqlite3.Connection):
                raise TypeError("SQLiteStore joins only a sqlite3.Connection's transaction")
            with self._errors("job_insert"):  # the caller's transaction decides
                return joined(conn, _jobs.insert, jobs)
        return self._run_sync("job_insert", lambda c: write(c, _jobs.insert, jobs))

    def _run_sync(self, operation: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on this thread's own connection (sync callers, any thread)."""
        own = getattr(self._sync_local, "conn", None)
        if own is None:
            own = connect(self.path, timeout=self._busy_timeout)
            self._sync_local.conn = own
            with self._sync_lock:
                self._sync_conns.append(own)
        with self._errors(operation):
            return fn(own)

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        limited: bool = False, keys: bool = True,
    ) -> list[JobRow]:
        if limited:
            return await self._run("job_claim", lambda c: write(
                c, _concurrency.claim, queue, list(kinds), limit, server_id, keys))
        return await self._run(
            "job_claim", lambda c: write(c, _jobs.claim, queue, list(kinds), limit, server_id)
        )

    async def concurrency_declare(
        self, limits: Mapping[str, int], server_id: str | None = None
    ) -> None:
        await self._run("concurrency_declare",
                        lambda c: write(c, _concurrency.declare, limits, server_id))

    async def concurrency_sweep(self, dead_after: float) -> list[str]:
        return await self._run("concurrency_sweep",
                               lambda c: write(c, _concurrency.sweep, dead_after))

    async def concurrency_keys_prune(self, idle_for: float, limit: int) -> int:
        return await self._run("concurrency_keys_prune",
                               lambda c: write(c, _concurrency.keys_prune, idle_for, limit))

    async def concurrency_remove(self, key: str, actor: str) -> tuple[int | None, list[str]]:
        return await self._run("concurrency_remove",
                               lambda c: write(c, _concurrency.remove, key, actor))

    async def concurrency_in_use(self) -> dict[str, int]:
        return await self._run("concurrency_in_use", _concurrency.in_use)

    async def jobs_unkey(self, kinds: Sequence[str]) -> dict[str, int]:
        if not await self._run("jobs_unkey", lambda c: _adopt.unkey_probe(c, kinds)):
            return {}
        return await self._run("jobs_unkey", lambda c: write(c, _adopt.unkey, kinds))

    async def concurrency_resize(self, limits: Mapping[str, int]) -> int:
        if not await self._run("concurrency_resize", lambda c: _adopt.resize_probe(c, limits)):
            return 0
        return await self._run("concurrency_resize",
                               lambda c: write(c, _adopt.resize, limits))

    async def jobs_waiting(self, kind: str, after_id: int, limit: int) -> list[WaitingJob]:
        return await self._run("jobs_waiting",
                               lambda c: _adopt.waiting(c, kind, after_id, limit))

    async def jobs_undeclared(self, kinds: Sequence[str], limit: int) -> list[WaitingJob]:
        return await self._run("jobs_undeclared", lambda c: _adopt.undeclared(c, kinds, limit))

    async def jobs_rekey(self, keys: Mapping[int, str], maxes: Mapping[str, int],
                         running_on: str | None = None) -> int:
        return await self._run("jobs_rekey",
                               lambda c: write(c, _adopt.rekey, keys, maxes, running_on))

    async def jobs_adopt(self, adoption: Adoption) -> dict[str, int]:
        return await self._run("jobs_adopt", lambda c: write(c, _adopt.adopt, adoption))

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        return await self._run(
            "job_results_apply", lambda c: write(c, _jobs.results_apply, results)
        )

    async def job_param_set(
        self, job_id: int, server_id: str, attempt: int, name: str, value: Any
    ) -> bool:
        return await self._run(
            "job_param_set",
            lambda c: write(c, _jobs.param_set, job_id, server_id, attempt, name, value),
        )

    async def jobs_release_due(self) -> ReleaseResult:
        return await self._run("jobs_release_due", lambda c: write(c, _jobs.release_due))

    async def job_get(self, job_id: int) -> JobRow | None:
        return await self._run("job_get", lambda c: _admin.get(c, job_id))

    async def job_list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None, *, brief: bool = False,
    ) -> list[JobRow]:
        return await self._run(
            "job_list",
            lambda c: _admin.list_jobs(c, filter, limit, before_id, after_id, brief),
        )

    async def job_ids(
        self, filter: JobFilter, limit: int, before_id: int | None = None
    ) -> list[int]:
        return await self._run("job_ids", lambda c: _admin.list_ids(c, filter, limit, before_id))

    async def job_count(self, filter: JobFilter) -> int:
        return await self._run("job_count", lambda c: _admin.count(c, filter))

    async def job_id_sums(self, filter: JobFilter) -> tuple[int, int, int, int, int]:
        return await self._run("job_id_sums", lambda c: _admin.id_sums(c, filter))

    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        return await self._run(
            "jobs_requeue", lambda c: write(c, _admin.requeue, filter, dead_after)
        )

    async def jobs_make_due(self, filter: JobFilter) -> int:
        return await self._run("jobs_make_due", lambda c: write(c, _admin.make_due, filter))

    async def jobs_admit_lifted(self, filter: JobFilter, retries_only: bool = False) -> int:
        return await self._run("jobs_admit_lifted",
                               lambda c: write(c, _admin.admit_lifted, filter, retries_only))

    async def jobs_cancel(self, filter: JobFilter, actor: str | None = None) -> int:
        return await self._run(
            "jobs_cancel", lambda c: write(c, _cancel.cancel, filter, actor)
        )

    async def jobs_cancel_requested(self, job_ids: Sequence[int]) -> list[CancelRequest]:
        if not job_ids:
            return []
        return await self._run(
            "jobs_cancel_requested", lambda c: _cancel.cancel_requested(c, list(job_ids))
        )

    async def jobs_delete(self, filter: JobFilter) -> int:
        return await self._run("jobs_delete", lambda c: write(c, _admin.delete, filter))

    async def job_dependents(self, job_id: int) -> list[int]:
        return await self._run("job_dependents", lambda c: _admin.dependents(c, job_id))

    async def job_dependency_results(self, job_id: int) -> dict[int, Any]:
        return await self._run(
            "job_dependency_results", lambda c: _admin.dependency_results(c, job_id)
        )

    async def job_counts(
        self, states: Sequence[JobState] | None = None, *, cap: int | None = None
    ) -> list[StateCount]:
        if cap is None:
            return await self._run("job_counts", lambda c: _admin.state_counts(c, states))
        # exact up to cap a queue and state, estimated above (_counts)
        return await self._run("job_counts", lambda c: _counts.state_counts(c, states, cap))

    async def queue_oldest_available(self) -> dict[str, float]:
        return await self._run("queue_oldest_available", _admin.oldest_available)

    async def queue_scheduled_due(self) -> dict[str, int]:
        return await self._run("queue_scheduled_due", _admin.scheduled_due)

    async def job_throughput(self, since_seconds: float) -> dict[str, int]:
        return await self._run("job_throughput", lambda c: _admin.throughput(c, since_seconds))

    async def job_counts_by_kind(self) -> list[tuple[str, JobState, int]]:
        return await self._run("job_counts_by_kind", _admin.counts_by_kind)

    async def job_kind_counts(self, cap: int) -> list[KindCount]:
        return await self._run("job_kind_counts", lambda c: _counts.kind_counts(c, cap))

    async def jobs_available_by_kind(self, cap: int | None = None) -> list[tuple[str, str, int]]:
        if cap is None:
            return await self._run("jobs_available_by_kind", _admin.available_by_kind)
        # exact up to cap a kind, estimated above (_counts)
        return await self._run("jobs_available_by_kind",
                               lambda c: _counts.available_by_kind(c, cap))

    async def job_error_groups(
        self, filter: JobFilter, limit: int, scan: int = ERROR_GROUP_SCAN
    ) -> list[tuple[str, int, int]]:
        return await self._run(
            "job_error_groups", lambda c: _admin.error_groups(c, filter, limit, scan)
        )

    async def job_timings(
        self, since_seconds: float, bucket_seconds: float, by: str
    ) -> list[TimingRow]:
        return await self._run(
            "job_timings", lambda c: _admin.timings(c, since_seconds, bucket_seconds, by)
        )

    async def job_finished_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[int, str, int]]:
        return await self._run(
            "job_finished_series",
            lambda c: _admin.finished_series(c, since_seconds, bucket_seconds),
        )

    async def queue_completed_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[str, int, int]]:
        return await self._run(
            "queue_completed_series",
            lambda c: _admin.completed_series_by_queue(c, since_seconds, bucket_seconds),
        )

    async def queue_running_counts(self) -> list[tuple[str, str, int]]:
        return await self._run("queue_running_counts", _admin.running_by_server)

    # servers, leader, maintenance ------------------------------------------------
    async def server_register(self, info: ServerInfo) -> None:
        await self._run("server_register", lambda c: write(c, _cluster.server_register, info))

    async def server_heartbeat(self, server_id: str, connections: int | None = None) -> bool:
        return await self._run(
            "server_heartbeat",
            lambda c: write(c, _cluster.server_heartbeat, server_id, connections),
        )

    async def server_deregister(self, server_id: str) -> None:
        await self._run(
            "server_deregister", lambda c: write(c, _cluster.server_deregister, server_id)
        )

    async def server_list(self) -> list[ServerInfo]:
        return await self._run("server_list", _cluster.server_list)

    async def leader_elect(self, server_id: str, ttl: float) -> bool:
        return await self._run(
            "leader_elect", lambda c: write(c, _cluster.leader_elect, server_id, ttl)
        )

    async def leader_resign(self, server_id: str) -> None:
        await self._run("leader_resign", lambda c: write(c, _cluster.leader_resign, server_id))

    async def leader_get(self) -> str | None:
        return await self._run("leader_get", _cluster.leader_get)

    async def installation_get(self) -> str | None:
        return await self._run("installation_get", _cluster.installation_get)

    async def jobs_rescue_candidates(self, dead_after: float, limit: int) -> list[RescueCandidate]:
        return await self._run(
            "jobs_rescue_candidates", lambda c: _cluster.rescue_candidates(c, dead_after, limit)
        )

    async def jobs_running_on(
        self, server_id: str, older_than: float, limit: int
    ) -> list[RunningJob]:
        return await self._run(
            "jobs_running_on", lambda c: _cluster.running_on(c, server_id, older_than, limit)
        )

    async def jobs_ending_release(self, dead_after: float) -> int:
        return await self._run(
            "jobs_ending_release", lambda c: write(c, _cluster.ending_dead, dead_after)
        )

    async def servers_sweep(self, dead_for: float) -> int:
        return await self._run("servers_sweep", lambda c: write(c, _cluster.sweep, dead_for))

    async def jobs_prune(self, state: JobState, older_than: float, limit: int) -> int:
        return await self._run(
            "jobs_prune", lambda c: write(c, _cluster.prune, state, older_than, limit)
        )

    async def timings_roll(self) -> tuple[int, bool]:
        return await self._run("timings_roll", lambda c: write(c, _rollup.roll))

    async def timings_rolled_to(self) -> int | None:
        return await self._run("timings_rolled_to", _rollup.rolled_to)

    async def jobs_release_stranded(self, limit: int) -> dict[str, int]:
        return await self._run(
            "jobs_release_stranded", lambda c: write(c, _cluster.release_stranded, limit)
        )

    # published kind declarations
    async def kinds_publish(
        self, server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
    ) -> None:
        await self._run(
            "kinds_publish", lambda c: write(c, _kinds.publish, server_id, host, pid, kinds)
        )

    async def kind_declarations(self) -> list[KindDeclaration]:
        return await self._run("kind_declarations", _kinds.newest)

    def kind_declarations_sync(self) -> list[KindDeclaration]:
        return self._run_sync("kind_declarations", _kinds.newest)

    async def kinds_list(self) -> list[PublishedKind]:
        return await self._run("kinds_list", _kinds.listed)

    async def kind_conflicts(self) -> int:
        return await self._run("kind_conflicts", _kinds.conflicts)

    async def table_sizes(self) -> list[TableSize]:
        return await self._run("table_sizes", _sizes.sizes)

    # rate limits -----------------------------------------------------------------
    async def rate_limit_declare(self, key: str, limit: RateLimit) -> None:
        await self._run(
            "rate_limit_declare", lambda c: write(c, _rates.rate_limit_declare, key, limit)
        )

    async def rate_keys_pending(self) -> list[str]:
        return await self._run("rate_keys_pending", _rates.rate_keys_pending)

    async def jobs_admit(
        self, key: str, max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> AdmitResult:
        chosen = None if queues is None else sorted(queues)
        return await self._run(
            "jobs_admit", lambda c: write(c, _rates.admit, key, max_batch, chosen, ahead))

    async def jobs_admit_keys(
        self, keys: Sequence[str], max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> dict[str, AdmitResult]:
        chosen = None if queues is None else sorted(queues)
        ordered = sorted(set(keys))
        return await self._run("jobs_admit_keys", lambda c: write(
            c, _rates.admit_keys, ordered, max_batch, chosen, ahead))

    async def rate_keys_prune(self, idle_for: float, keep: Sequence[str], limit: int) -> int:
        return await self._run("rate_keys_prune", lambda c: write(
            c, _rates.rate_keys_prune, idle_for, sorted(keep), limit))

    async def rate_limit_list(self) -> list[tuple[str, RateLimit, int]]:
        return await self._run("rate_limit_list", _rates.rate_limit_list)

    async def rate_keys_backlog(
        self, limit: int, *, cap: int | None = None
    ) -> list[tuple[str, RateLimit | None, int]]:
        if cap is None:
            return await self._run("rate_keys_backlog",
                                   lambda c: _rates.rate_keys_backlog(c, limit))
        # each key exact up to cap, estimated above (_counts)
        return await self._run("rate_keys_backlog",
                               lambda c: _counts.rate_keys_backlog(c, limit, cap))

    # recurring jobs ----------------------------------------------------------------
    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        return await self._run(
            "cron_enqueue", lambda c: write(c, _cluster.cron_enqueue, name, slot, job)
        )

    async def cron_last_slot(self, name: str) -> datetime | None:
        return await self._run("cron_last_slot", lambda c: _cluster.cron_last_slot(c, name))

    # queue controls ----------------------------------------------------------------
    async def queue_pause(self, queue: str, actor: str) -> bool:
        return await self._run(
            "queue_pause", lambda c: write(c, _controls.pause, queue, actor)
        )

    async def queue_resume(self, queue: str, actor: str) -> int:
        return await self._run(
            "queue_resume", lambda c: write(c, _controls.resume, queue, actor)
        )

    async def queue_limit_set(
        self, queue: str, server_id: str, concurrency: int | None, actor: str
    ) -> None:
        await self._run("queue_limit_set", lambda c: write(
            c, _controls.limit_set, queue, server_id, concurrency, actor
        ))

    async def queue_controls(self) -> QueueControls:
        return await self._run("queue_controls", _controls.controls)

    # audit -------------------------------------------------------------------------
    async def audit_record(
        self, actor: str, action: str, count: int, detail: dict[str, Any]
    ) -> None:
        await self._run(
            "audit_record",
            lambda c: write(c, _cluster.audit_record, actor, action, count, detail),
        )

    async def audit_list(
        self, limit: int = 50, query: AuditQuery | None = None
    ) -> list[AuditEntry]:
        q = query or AuditQuery()
        return await self._run("audit_list", lambda c: _cluster.audit_list(c, limit, q))
