"""PostgresStore: the Store protocol over PostgreSQL with psycopg 3.

Owns the connection pool (``max_conns``, 8 by default), the one extra LISTEN
connection, the lazily opened sync connection for enqueue from sync code, and the
boundary where psycopg errors become kiln errors. The statements live in the
modules named alike in every dialect (_jobs, _admin, _cluster, _rates, _schema, ...:
see docs/adr/0002-store-contract.md); this module only runs them. Pool connections
are in autocommit mode: a single statement is its own transaction, and
multi-statement plans send BEGIN and COMMIT in the same pipelines as their statements.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool

from kiln._controls import QueueControls
from kiln._errors import NotMigratedError, UnreachableError
from kiln._job import (
    AdmitResult,
    AuditEntry,
    CancelRequest,
    JobFilter,
    JobResult,
    JobRow,
    JobState,
    KindDeclaration,
    NewJob,
    PublishedKind,
    RateLimit,
    RescueCandidate,
    RunningJob,
    ServerInfo,
    StateCount,
)
from kiln.stores._protocol import (
    DEAD_AFTER,
    ApplyResult,
    Capabilities,
    ClaimCallback,
    ClaimWatch,
    NotifyCallback,
    ReleaseResult,
    TableSize,
)
from kiln.stores._translator import Translator
from kiln.stores.postgres import (
    _admin,
    _cancel,
    _cluster,
    _concurrency,
    _controls,
    _jobs,
    _kinds,
    _rates,
    _schema,
    _sizes,
)
from kiln.stores.postgres._errors import is_driver_error, translate, where
from kiln.stores.postgres._listener import Listener
from kiln.stores.postgres._plan import Counter, Plan, run_async, run_sync

T = TypeVar("T")
_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_CLOSE_WAIT = 1.0  # seconds close() waits for the pool's workers (psycopg_pool: 5)


class PostgresStore:
    """A Store over PostgreSQL (``postgresql://user@host:5432/db``)."""

    capabilities = Capabilities(listen_notify=True, claim_on_notify=True)

    def __init__(
        self, url: str, max_conns: int = 8, *, connect_timeout: float = 10.0,
        min_conns: int = 1,
    ) -> None:
        self.url = url
        self._max_conns = max_conns
        self._min_conns = min(min_conns, max_conns)
        self._connect_timeout = connect_timeout
        self._pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._open_lock: asyncio.Lock | None = None
        self._counter = Counter()
        self._listener = Listener(url, self._counter, connect_timeout=connect_timeout)
        self._sync_conn: psycopg.Connection[Any] | None = None
        self._sync_lock = threading.Lock()
        self._errors = Translator(url, is_driver_error, translate)

    # lifecycle -----------------------------------------------------------------
    async def open(self) -> None:
        if self._pool is not None:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._pool is not None:
                return
            pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] = (
                psycopg_pool.AsyncConnectionPool(
                    self.url, min_size=self._min_conns, max_size=self._max_conns,
                    open=False, name="kiln-pg", timeout=self._connect_timeout,
                    kwargs={"autocommit": True, "connect_timeout": self._timeout_s()},
                )
            )
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
            except psycopg_pool.PoolTimeout as exc:
                await pool.close()
                raise await self._unreachable(exc) from exc
            self._pool = pool

    def _timeout_s(self) -> int:
        return max(int(self._connect_timeout), 1)

    async def _unreachable(self, exc: BaseException) -> UnreachableError:
        """The pool only says it timed out: one direct attempt gives the reason."""
        reason = str(exc)
        try:
            conn = await psycopg.AsyncConnection.connect(self.url, connect_timeout=2)
            await conn.close()
        except psycopg.Error as direct:
            reason = str(direct).strip()
        return UnreachableError("open", f"cannot reach PostgreSQL at {where(self.url)}: {reason}")

    async def close(self) -> None:
        await self._listener.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            # its workers may be connecting to a silent server (connect_timeout): past
            # this, psycopg_pool leaves them to end on their own rather than wait
            await pool.close(timeout=_CLOSE_WAIT)
        with self._sync_lock:
            conn, self._sync_conn = self._sync_conn, None
        if conn is not None:
            conn.close()

    async def _run(
        self, operation: str, plan: Callable[[], Plan[T]], *, tx: bool = False
    ) -> T:
        if self._pool is None:
            await self.open()
        pool = self._pool
        assert pool is not None
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        with self._errors(operation):
            for attempt in range(3):
                try:
                    async with pool.connection() as conn:
                        if task is not None and task.cancelling() > cancels:
                            # a cancel that came while psycopg_pool waited for a
                            # connection: on Python 3.11 its asyncio.wait_for can return
                            # the connection and drop the cancellation, which would keep
                            # a stopping service running for ever
                            raise asyncio.CancelledError
                        return await run_async(conn, plan(), self._counter, tx=tx)
                except _RETRIED:  # the whole transaction rolled back: safe to run again
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def query_count(self) -> int:
        return self._counter.value

    async def migrate(self) -> list[int]:
        return await self._run("migrate", _schema.migrate, tx=True)

    async def schema_check(self) -> None:
        want = _schema.latest()
        have = await self._run("schema_check", _schema.version)
        if have < want:
            raise NotMigratedError(
                "schema_check",
                f"database {where(self.url)} is at schema {have}, kiln needs {want}:"
                " run `kiln migrate`",
            )

    async def schema_version(self) -> int:
        return await self._run("schema_version", _schema.version)

    async def now(self) -> datetime:
        return await self._run("now", _schema.now)

    async def listen(self, callback: NotifyCallback) -> None:
        await self._listener.start(callback)

    def listening(self) -> bool:
        return self._listener.up()

    # jobs ------------------------------------------------------------------------
    async def job_insert_many(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is None:
            return await self._run("job_insert", lambda: _jobs.insert(jobs), tx=True)
        if isinstance(conn, psycopg.Connection):
            return self.job_insert_many_sync(jobs, conn)
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError("PostgresStore joins only a psycopg Connection or AsyncConnection")
        with self._errors("job_insert"):  # the caller owns the transaction: no BEGIN, no COMMIT
            return await run_async(conn, _jobs.insert(jobs), self._counter, tx=False)

    def job_insert_many_sync(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise TypeError("PostgresStore joins only a psycopg Connection's transaction")
            with self._errors("job_insert"):
                return run_sync(conn, _jobs.insert(jobs), self._counter, tx=False)
        return self._run_sync("job_insert", _jobs.insert(jobs), tx=True)

    def _run_sync(self, operation: str, plan: Plan[T], *, tx: bool = False) -> T:
        """Run ``plan`` on the store's one sync connection (sync callers, any thread)."""
        with self._sync_lock, self._errors(operation):
            if self._sync_conn is None or self._sync_conn.closed:
                self._sync_conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=self._timeout_s()
                )
                # sync callers may never await close(): close it with the store
                weakref.finalize(self, self._sync_conn.close)
            return run_sync(self._sync_conn, plan, self._counter, tx=tx)

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        limited: bool = False,
    ) -> list[JobRow]:
        if limited:
            return await self._run(
                "job_claim", lambda: _concurrency.claim(queue, list(kinds), limit, server_id),
                tx=True,
            )
        return await self._run(
            "job_claim", lambda: _jobs.claim(queue, list(kinds), limit, server_id)
        )

    async def concurrency_declare(self, limits: Mapping[str, int]) -> None:
        await self._run("concurrency_declare", lambda: _concurrency.declare(limits))

    async def concurrency_in_use(self) -> dict[str, int]:
        return await self._run("concurrency_in_use", _concurrency.in_use)

    def job_claim_watch(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        on_claimed: ClaimCallback,
    ) -> ClaimWatch | None:
        # None while the LISTEN connection is down (the claimer has no connection then)
        return self._listener.claimer.watch(queue, kinds, limit, server_id, on_claimed)

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        applied = await self._run(
            "job_results_apply", lambda: _jobs.results_apply(results), tx=True
        )
        if applied.applied < len(results):  # some were fenced off: cancelled while running?
            await self._run("job_results_apply", lambda: _jobs.attempts_end(results))
        return applied

    async def job_param_set(
        self, job_id: int, server_id: str, attempt: int, name: str, value: Any
    ) -> bool:
        return await self._run(
            "job_param_set", lambda: _jobs.param_set(job_id, server_id, attempt, name, value)
        )

    async def jobs_release_due(self) -> ReleaseResult:
        return await self._run("jobs_release_due", _jobs.release_due)

    async def job_get(self, job_id: int) -> JobRow | None:
        return await self._run("job_get", lambda: _admin.get(job_id))

    async def job_list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None,
    ) -> list[JobRow]:
        return await self._run("job_list",
                               lambda: _admin.list_jobs(filter, limit, before_id, after_id))

    async def job_ids(
        self, filter: JobFilter, limit: int, before_id: int | None = None
    ) -> list[int]:
        return await self._run("job_ids", lambda: _admin.list_ids(filter, limit, before_id))

    async def job_count(self, filter: JobFilter) -> int:
        return await self._run("job_count", lambda: _admin.count(filter))

    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        return await self._run("jobs_requeue", lambda: _admin.requeue(filter, dead_after))

    async def jobs_make_due(self, filter: JobFilter) -> int:
        return await self._run("jobs_make_due", lambda: _admin.make_due(filter))

    async def jobs_cancel(self, filter: JobFilter, actor: str | None = None) -> int:
        return await self._run("jobs_cancel", lambda: _cancel.cancel(filter, actor))

    async def jobs_cancel_requested(self, job_ids: Sequence[int]) -> list[CancelRequest]:
        if not job_ids:
            return []
        return await self._run(
            "jobs_cancel_requested", lambda: _cancel.cancel_requested(job_ids)
        )

    async def jobs_delete(self, filter: JobFilter) -> int:
        return await self._run("jobs_delete", lambda: _admin.delete(filter), tx=True)

    async def job_dependents(self, job_id: int) -> list[int]:
        return await self._run("job_dependents", lambda: _admin.dependents(job_id))

    async def job_dependency_results(self, job_id: int) -> dict[int, Any]:
        return await self._run(
            "job_dependency_results", lambda: _admin.dependency_results(job_id)
        )

    async def job_counts(self) -> list[StateCount]:
        return await self._run("job_counts", _admin.state_counts)

    async def queue_oldest_available(self) -> dict[str, float]:
        return await self._run("queue_oldest_available", _admin.oldest_available)

    async def job_throughput(self, since_seconds: float) -> dict[str, int]:
        return await self._run("job_throughput", lambda: _admin.throughput(since_seconds))

    async def job_counts_by_kind(self) -> list[tuple[str, JobState, int]]:
        return await self._run("job_counts_by_kind", _admin.counts_by_kind)

    async def job_finished_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[int, str, int]]:
        return await self._run("job_finished_series",
                               lambda: _admin.finished_series(since_seconds, bucket_seconds))

    async def queue_completed_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[str, int, int]]:
        return await self._run(
            "queue_completed_series",
            lambda: _admin.completed_series_by_queue(since_seconds, bucket_seconds),
        )

    async def queue_running_counts(self) -> list[tuple[str, str, int]]:
        return await self._run("queue_running_counts", _admin.running_by_server)

    # servers, leader, maintenance ------------------------------------------------
    async def server_register(self, info: ServerInfo) -> None:
        await self._run("server_register", lambda: _cluster.server_register(info))

    async def server_heartbeat(self, server_id: str) -> bool:
        return await self._run("server_heartbeat", lambda: _cluster.server_heartbeat(server_id))

    async def server_deregister(self, server_id: str) -> None:
        await self._run("server_deregister", lambda: _cluster.server_deregister(server_id))

    async def server_list(self) -> list[ServerInfo]:
        return await self._run("server_list", _cluster.server_list)

    async def leader_elect(self, server_id: str, ttl: float) -> bool:
        return await self._run("leader_elect", lambda: _cluster.leader_elect(server_id, ttl))

    async def leader_resign(self, server_id: str) -> None:
        await self._run("leader_resign", lambda: _cluster.leader_resign(server_id))

    async def leader_get(self) -> str | None:
        return await self._run("leader_get", _cluster.leader_get)

    async def jobs_rescue_candidates(self, dead_after: float, limit: int) -> list[RescueCandidate]:
        return await self._run(
            "jobs_rescue_candidates", lambda: _cluster.rescue_candidates(dead_after, limit)
        )

    async def jobs_running_on(
        self, server_id: str, older_than: float, limit: int
    ) -> list[RunningJob]:
        return await self._run(
            "jobs_running_on", lambda: _cluster.running_on(server_id, older_than, limit)
        )

    async def servers_sweep(self, dead_for: float) -> int:
        return await self._run("servers_sweep", lambda: _cluster.sweep(dead_for))

    async def jobs_prune(self, state: JobState, older_than: float, limit: int) -> int:
        return await self._run(
            "jobs_prune", lambda: _cluster.prune(state, older_than, limit), tx=True
        )

    async def jobs_release_stranded(self, limit: int) -> dict[str, int]:
        return await self._run(
            "jobs_release_stranded", lambda: _cluster.release_stranded(limit), tx=True
        )

    # published kind declarations -------------------------------------------------
    async def kinds_publish(
        self, server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
    ) -> None:
        await self._run(
            "kinds_publish", lambda: _kinds.publish(server_id, host, pid, kinds), tx=True
        )

    async def kind_declarations(self) -> list[KindDeclaration]:
        return await self._run("kind_declarations", _kinds.newest)

    def kind_declarations_sync(self) -> list[KindDeclaration]:
        return self._run_sync("kind_declarations", _kinds.newest())

    async def kinds_list(self) -> list[PublishedKind]:
        return await self._run("kinds_list", _kinds.listed)

    async def kind_conflicts(self) -> int:
        return await self._run("kind_conflicts", _kinds.conflicts)

    async def table_sizes(self) -> list[TableSize]:
        return await self._run("table_sizes", _sizes.sizes)

    # rate limits -----------------------------------------------------------------
    async def rate_limit_declare(self, key: str, limit: RateLimit) -> None:
        await self._run("rate_limit_declare", lambda: _rates.rate_limit_declare(key, limit))

    async def rate_keys_pending(self) -> list[str]:
        return await self._run("rate_keys_pending", _rates.rate_keys_pending)

    async def jobs_admit(self, key: str, max_batch: int) -> AdmitResult:
        return await self._run("jobs_admit", lambda: _rates.admit(key, max_batch), tx=True)

    async def rate_limit_list(self) -> list[tuple[str, RateLimit, int]]:
        return await self._run("rate_limit_list", _rates.rate_limit_list)

    # recurring jobs ----------------------------------------------------------------
    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        return await self._run(
            "cron_enqueue", lambda: _cluster.cron_enqueue(name, slot, job), tx=True
        )

    async def cron_last_slot(self, name: str) -> datetime | None:
        return await self._run("cron_last_slot", lambda: _cluster.cron_last_slot(name))

    # queue controls ----------------------------------------------------------------
    async def queue_pause(self, queue: str, actor: str) -> bool:
        return await self._run("queue_pause", lambda: _controls.pause(queue, actor), tx=True)

    async def queue_resume(self, queue: str, actor: str) -> int:
        return await self._run("queue_resume", lambda: _controls.resume(queue, actor), tx=True)

    async def queue_limit_set(
        self, queue: str, server_id: str, concurrency: int | None, actor: str
    ) -> None:
        await self._run(
            "queue_limit_set",
            lambda: _controls.limit_set(queue, server_id, concurrency, actor), tx=True,
        )

    async def queue_controls(self) -> QueueControls:
        return await self._run("queue_controls", _controls.controls)

    # audit -------------------------------------------------------------------------
    async def audit_record(
        self, actor: str, action: str, count: int, detail: dict[str, Any]
    ) -> None:
        await self._run(
            "audit_record", lambda: _cluster.audit_record(actor, action, count, detail)
        )

    async def audit_list(self, limit: int = 50) -> list[AuditEntry]:
        return await self._run("audit_list", lambda: _cluster.audit_list(limit))
