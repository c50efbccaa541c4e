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

from kiln._errors import UnreachableError
from kiln._job import (
    JobResult,
    JobRow,
    KindDeclaration,
    NewJob,
)
from kiln.stores._plan_store import PlanSql, PlanStore
from kiln.stores._protocol import (
    ApplyResult,
    Capabilities,
    ClaimCallback,
    ClaimWatch,
    NotifyCallback,
    ReleaseResult,
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
from kiln.stores.postgres._plan import Counter, Plan, Rows, Step, run_async, run_sync

T = TypeVar("T")
_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_CLOSE_WAIT = 1.0  # seconds close() waits for the pool's workers (psycopg_pool: 5)


_SQL: PlanSql[Step, list[Rows]] = PlanSql(
    schema=_schema, jobs=_jobs, admin=_admin, cancel=_cancel, cluster=_cluster,
    rates=_rates, kinds=_kinds, controls=_controls, sizes=_sizes,
)


class PostgresStore(PlanStore[Step, list[Rows]]):
    """A Store over PostgreSQL (``postgresql://user@host:5432/db``).

    The operations that only forward to a statement are PlanStore's."""

    capabilities = Capabilities(listen_notify=True, claim_on_notify=True)
    _sql = _SQL

    def __init__(
        self, url: str, max_conns: int = 8, *, connect_timeout: float = 10.0,
        min_conns: int = 1,
    ) -> None:
        self.url = url
        self._where = where(url)
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
        return UnreachableError("open", f"cannot reach PostgreSQL at {self._where}: {reason}")

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

    async def _read(self, operation: str, make: Callable[[], Plan[T]]) -> T:
        return await self._run(operation, make)

    async def _write(
        self, operation: str, make: Callable[[], Plan[T]], *, tx: bool = False
    ) -> T:
        return await self._run(operation, make, tx=tx)

    def query_count(self) -> int:
        return self._counter.value

    async def migrate(self) -> list[int]:
        return await self._run("migrate", _schema.migrate, tx=True)

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
        limited: bool = False, keys: bool = True,
    ) -> list[JobRow]:
        if limited:
            return await self._run(
                "job_claim",
                lambda: _concurrency.claim(queue, list(kinds), limit, server_id, keys),
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

    async def jobs_release_due(self) -> ReleaseResult:
        return await self._run("jobs_release_due", _jobs.release_due)

    def kind_declarations_sync(self) -> list[KindDeclaration]:
        return self._run_sync("kind_declarations", _kinds.newest())

    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        return await self._run(
            "cron_enqueue", lambda: _cluster.cron_enqueue(name, slot, job), tx=True
        )
