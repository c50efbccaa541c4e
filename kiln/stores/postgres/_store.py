"""PostgresStore: the Store protocol over PostgreSQL with psycopg 3.

Owns the connection pool (``max_conns``, 8 by default), the one extra LISTEN
connection, the lazily opened sync connection for enqueue from sync code, and the
boundary where psycopg errors become kiln errors. Behind a transaction-mode pooler
(``pooler="transaction"``, kiln.stores.postgres._settings) nothing is prepared on the
server and the LISTEN connection, if any, goes to ``listen_url``. The statements live in the
modules named alike in every dialect (_jobs, _admin, _cluster, _rates, _schema, ...:
see docs/adr/0002-store-contract.md); this module only runs them. Pool connections
are in autocommit mode: a single statement is its own transaction, and
multi-statement plans send BEGIN and COMMIT in the same pipelines as their statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg import pq

from kiln._errors import UnreachableError
from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._job import (
    DEAD_AFTER,
    JobFilter,
    JobResult,
    JobRow,
    KindDeclaration,
    NewJob,
)
from kiln._model._wakeup import CHANNEL
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
    _adopt,
    _cancel,
    _cluster,
    _concurrency,
    _controls,
    _jobs,
    _kinds,
    _online,
    _rates,
    _schema,
    _sizes,
)
from kiln.stores.postgres._errors import is_driver_error, translate, where
from kiln.stores.postgres._limiter import NOTIFY_WINDOW, NotifyLimiter
from kiln.stores.postgres._listener import Listener, application_name
from kiln.stores.postgres._owed import OwedPayer
from kiln.stores.postgres._plan import Counter, Plan, Rows, Step, one, run_async, run_sync
from kiln.stores.postgres._settings import settings

T = TypeVar("T")
log = logging.getLogger("kiln.stores.postgres")
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
        min_conns: int = 1, pooler: str | None = None, listen_url: str | None = None,
        schema: str | None = None, notify_window: float = NOTIFY_WINDOW,
        notify: bool = True,
    ) -> None:
        self.url = url
        self.settings = settings(url, pooler=pooler, listen_url=listen_url, schema=schema,
                                 notify=notify)
        self._conninfo = self.settings.conninfo
        self._schema = self.settings.schema
        self._where = where(self._conninfo) + (f" schema {schema}" if schema else "")
        self._max_conns = max_conns
        self._min_conns = min(min_conns, max_conns)
        self._connect_timeout = connect_timeout
        self._prepared = self.settings.prepared
        # behind a transaction-mode pooler psycopg must never prepare (it would after
        # 5 runs of a statement): the next transaction may run on another connection
        self._kwargs: dict[str, Any] = {} if self._prepared else {"prepare_threshold": None}
        # pg_stat_activity names kiln's connections (the URL may name them itself)
        self._kwargs["application_name"] = application_name(self._conninfo, "kiln")
        self._qualify = self.settings.qualifier()
        # per queue at most one NOTIFY per notify_window from this process (_limiter);
        # without notify (a Bus carries the wake-ups) every insert is quiet
        self._notifies = notify
        self._limiter = NotifyLimiter(notify_window) if notify and notify_window > 0 else None
        self._owed: asyncio.TimerHandle | None = None
        self._owing: set[asyncio.Task[None]] = set()
        self._notify_failing = False  # the last owed NOTIFY failed (warned once per streak)
        self._pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._open_lock: asyncio.Lock | None = None
        self._counter = Counter()
        listen = self.settings.listen_conninfo
        if listen is None:  # nothing to listen on (or no NOTIFY): polls, or hears a Bus
            self.capabilities = Capabilities(listen_notify=False, claim_on_notify=False)
        self._listener = Listener(
            listen or self._conninfo, self._counter, connect_timeout=connect_timeout,
            where=where(listen or self._conninfo), probe=self._probe,
            channel=self.settings.channel, qualify=self._qualify,
        )
        self._sync_conn: psycopg.Connection[Any] | None = None
        self._payer: OwedPayer | None = None
        self._sync_lock = threading.Lock()
        self._errors = Translator(self._conninfo, is_driver_error, translate)

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
                    self._conninfo, min_size=self._min_conns, max_size=self._max_conns,
                    open=False, name="kiln-pg", timeout=self._connect_timeout,
                    kwargs={"autocommit": True, "connect_timeout": self._timeout_s(),
                            **self._kwargs},
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
            conn = await psycopg.AsyncConnection.connect(self._conninfo, connect_timeout=2)
            await conn.close()
        except psycopg.Error as direct:
            reason = str(direct).strip()
        return UnreachableError("open", f"cannot reach PostgreSQL at {self._where}: {reason}")

    async def close(self) -> None:
        if self._owed is not None:
            self._owed.cancel()
            self._owed = None
        if self._payer is not None:
            self._payer.stop()  # what is owed goes out now (sync connection), not never
            self._payer = None
        elif self._limiter is not None and self._pool is not None:
            queues = self._limiter.settle()  # what is owed goes out now, not never
            if queues:
                await self._notify(queues)
        for task in list(self._owing):
            with contextlib.suppress(Exception):
                await task
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
        self, operation: str, plan: Callable[[], Plan[T]], *, tx: bool = False,
        retried: tuple[type[psycopg.Error], ...] = _RETRIED,
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
                    # getconn/putconn, not pool.connection(): its ``async with conn``
                    # takes the connection's lock for a COMMIT an autocommit connection
                    # never needs (a wait per call on the enqueue path); putconn rolls
                    # back or discards a connection left in a transaction, as it would
                    conn = await pool.getconn()
                    try:
                        if task is not None and task.cancelling() > cancels:
                            # a cancel that came while psycopg_pool waited for a
                            # connection: on Python 3.11 its asyncio.wait_for can return
                            # the connection and drop the cancellation, which would keep
                            # a stopping service running for ever
                            raise asyncio.CancelledError
                        return await run_async(conn, plan(), self._counter, tx=tx,
                                               prepared=self._prepared, qualify=self._qualify)
                    finally:
                        await pool.putconn(conn)
                except retried:  # the whole transaction rolled back: safe to run again
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
        schema = self._schema
        if not self.settings.transaction_pooled:
            # online (kiln.stores.postgres._online): a session of its own, index builds
            # CONCURRENTLY outside the transaction
            with self._errors("migrate"):
                return await _online.migrate(
                    self._conninfo, schema, connect_timeout=self._timeout_s(), **self._kwargs)
        # behind a transaction-mode pooler there is no session to hold a lock or build
        # outside a transaction: one transaction, as the script runs (indexes lock)
        if schema is not None:
            return await self._run("migrate", lambda: _schema.migrate_in(schema), tx=True)
        return await self._run("migrate", _schema.migrate, tx=True)

    async def now(self) -> datetime:
        return await self._run("now", _schema.now)

    async def listen(self, callback: NotifyCallback) -> None:
        await self._listener.start(callback)

    async def _probe(self, channel: str) -> None:
        """The listener's check that its connection hears: a NOTIFY from the pool."""
        await self._run("listen_probe", lambda: _probe_plan(channel))

    def listening(self) -> bool:
        return self._listener.up()

    def connections(self) -> int:
        pool, sync = self._pool, self._sync_conn
        held = int(pool.get_stats().get("pool_size", 0)) if pool is not None else 0
        return held + int(self._listener.up()) + int(sync is not None and not sync.closed)

    # jobs ------------------------------------------------------------------------
    async def job_insert_many(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is None:
            quiet = self._quiet(jobs)
            if quiet is False:  # the window's NOTIFY: in flight until it finished
                return await self._notifying(jobs)
            ids = await self._run("job_insert", lambda: _jobs.insert(jobs, quiet=bool(quiet)),
                                  tx=True)
            if quiet and self._limiter is not None:
                self._limiter.landed(jobs[0].queue)
                self._owe()
            return ids
        if isinstance(conn, psycopg.Connection):
            return self.job_insert_many_sync(jobs, conn)
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError("PostgresStore joins only a psycopg Connection or AsyncConnection")
        with self._errors("job_insert"):
            return await run_async(conn, _jobs.insert(jobs), self._counter, tx=_no_tx(conn),
                                   prepared=self._prepared, qualify=self._qualify)

    def _quiet(self, jobs: Sequence[NewJob]) -> bool | None:
        """Whether this insert may skip its NOTIFY (the limiter's call): only plain
        jobs available at once, all of one queue, whose queue was notified within the
        window or has a notifying insert in flight. False: it notifies as the window's
        NOTIFY (``_notifying`` tells the limiter when it finished); None: it notifies
        and the limiter has no say."""
        if self._limiter is None or not jobs:
            return True if not self._notifies else None
        queue = jobs[0].queue
        for j in jobs:
            if (j.queue != queue or j.after or j.unique_key is not None or j.rate_key
                    or j.depends_on or j.run_at is not None or j.delay > 0):
                return None
        return self._limiter.quiet(queue)

    async def _notifying(self, jobs: Sequence[NewJob]) -> list[int]:
        limiter = self._limiter
        assert limiter is not None
        ok = False
        try:
            ids = await self._run("job_insert", lambda: _jobs.insert(jobs), tx=True)
            ok = True
            return ids
        finally:
            if limiter.notified(jobs[0].queue, ok) is not None:
                self._owe()  # what landed while it was in flight

    def _owe(self) -> None:
        """A quiet insert's queue is owed its wake-up when the window ends: the timer is
        armed for the earliest owed wake-up, and moved earlier when one comes due before
        it (a notifying insert in flight ended: what landed behind it is due at its
        window's end, not when it would have counted as stuck)."""
        limiter = self._limiter
        if limiter is None:
            return
        delay = limiter.delay()
        if delay is None:
            return
        loop = asyncio.get_running_loop()
        armed = self._owed
        if armed is not None:
            if armed.when() <= loop.time() + delay:
                return
            armed.cancel()
        self._owed = loop.call_later(delay, self._pay)

    def _pay(self) -> None:
        self._owed = None
        assert self._limiter is not None
        queues = self._limiter.due()
        if queues:
            task = asyncio.ensure_future(self._notify(queues))
            self._owing.add(task)
            task.add_done_callback(self._owing.discard)
        self._owe()  # queues owed later than these

    async def _notify(self, queues: list[str]) -> None:
        try:
            await self._run("job_notify", lambda: _notify_plan(queues))
        except Exception:  # servers find the jobs at their next poll: say so, once
            if not self._notify_failing:
                log.warning("kiln: could not send the wake-up owed to %s (servers find"
                            " the jobs at their next poll)", queues, exc_info=True)
            self._notify_failing = True
            return
        if self._notify_failing:
            log.warning("kiln: owed wake-ups go out again")
            self._notify_failing = False

    def job_insert_many_sync(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is not None:
            if not isinstance(conn, psycopg.Connection):
                raise TypeError("PostgresStore joins only a psycopg Connection's transaction")
            with self._errors("job_insert"):
                return run_sync(conn, _jobs.insert(jobs), self._counter, tx=_no_tx(conn),
                                prepared=self._prepared, qualify=self._qualify)
        quiet = self._quiet(jobs)
        if quiet is False:  # the window's NOTIFY: in flight until it finished
            assert self._limiter is not None
            ok = False
            try:
                ids = self._run_sync("job_insert", lambda: _jobs.insert(jobs), tx=True)
                ok = True
                return ids
            finally:
                due = self._limiter.notified(jobs[0].queue, ok)
                if due is not None:
                    self._owed_payer().owe(due)  # what landed while it was in flight
        ids = self._run_sync("job_insert", lambda: _jobs.insert(jobs, quiet=bool(quiet)),
                             tx=True)
        if quiet and self._limiter is not None:
            self._owed_payer().owe(self._limiter.landed(jobs[0].queue))
        return ids

    def _owed_payer(self) -> OwedPayer:
        """The thread that sends the wake-ups owed to sync inserts (_owed)."""
        if self._payer is None:
            with self._sync_lock:
                if self._payer is None:
                    assert self._limiter is not None
                    self._payer = OwedPayer(self._limiter, _sender(weakref.ref(self)))
                    weakref.finalize(self, self._payer.stop)
        return self._payer

    def _notify_sync(self, queues: list[str]) -> None:
        self._run_sync("job_notify", lambda: _notify_plan(queues))

    def _run_sync(self, operation: str, make: Callable[[], Plan[T]], *, tx: bool = False) -> T:
        """Run a plan on the store's one sync connection (sync callers, any thread);
        a deadlock victim's plan runs again, as _run does."""
        with self._sync_lock, self._errors(operation):
            for attempt in range(3):
                if self._sync_conn is None or self._sync_conn.closed:
                    self._sync_conn = psycopg.connect(
                        self._conninfo, autocommit=True, connect_timeout=self._timeout_s(),
                        **self._kwargs,
                    )
                    # sync callers may never await close(): close it with the store
                    weakref.finalize(self, self._sync_conn.close)
                try:
                    return run_sync(self._sync_conn, make(), self._counter, tx=tx,
                                    prepared=self._prepared, qualify=self._qualify)
                except _RETRIED:  # the whole transaction rolled back: safe to run again
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

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

    async def concurrency_declare(
        self, limits: Mapping[str, int], server_id: str | None = None
    ) -> None:
        await self._run("concurrency_declare",
                        lambda: _concurrency.declare(limits, server_id), tx=True)

    async def concurrency_sweep(self, dead_after: float) -> list[str]:
        return await self._run("concurrency_sweep", lambda: _concurrency.sweep(dead_after),
                               tx=True)

    async def concurrency_keys_prune(self, idle_for: float, limit: int) -> int:
        return await self._run("concurrency_keys_prune",
                               lambda: _concurrency.keys_prune(idle_for, limit), tx=True)

    async def concurrency_remove(self, key: str, actor: str) -> tuple[int | None, list[str]]:
        return await self._run("concurrency_remove",
                               lambda: _concurrency.remove(key, actor), tx=True)

    async def concurrency_in_use(self) -> dict[str, int]:
        return await self._run("concurrency_in_use", _concurrency.in_use)

    async def jobs_unkey(self, kinds: Sequence[str]) -> dict[str, int]:
        return await self._run("jobs_unkey", lambda: _adopt.unkey(kinds))

    async def concurrency_resize(self, limits: Mapping[str, int]) -> int:
        return await self._run("concurrency_resize", lambda: _adopt.resize(limits))

    async def jobs_waiting(self, kind: str, after_id: int, limit: int) -> list[WaitingJob]:
        return await self._run("jobs_waiting", lambda: _adopt.waiting(kind, after_id, limit))

    async def jobs_undeclared(self, kinds: Sequence[str], limit: int) -> list[WaitingJob]:
        return await self._run("jobs_undeclared", lambda: _adopt.undeclared(kinds, limit))

    async def jobs_rekey(self, keys: Mapping[int, str], maxes: Mapping[str, int],
                         running_on: str | None = None) -> int:
        return await self._run("jobs_rekey", lambda: _adopt.rekey(keys, maxes, running_on),
                               tx=True)

    async def jobs_adopt(self, adoption: Adoption) -> dict[str, int]:
        return await self._run("jobs_adopt", lambda: _adopt.adopt(adoption), tx=True)

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

    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        # A unique job's holder check reads the statement's snapshot: a holder enqueued
        # but not committed is invisible to it, and the update then fails on the unique
        # index once the holder commits. The next run's snapshot sees the holder, and
        # leaves that job where it is (the guide's rule) while the others go back.
        return await self._run(
            "jobs_requeue", lambda: _admin.requeue(filter, dead_after),
            retried=(*_RETRIED, psycopg.errors.UniqueViolation),
        )

    def kind_declarations_sync(self) -> list[KindDeclaration]:
        return self._run_sync("kind_declarations", _kinds.newest)

    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        return await self._run(
            "cron_enqueue", lambda: _cluster.cron_enqueue(name, slot, job), tx=True
        )


def _sender(store: weakref.ref[PostgresStore]) -> Callable[[list[str]], bool]:
    """The owed payer's send: through the store while it lives (False once it is gone)."""
    def send(queues: list[str]) -> bool:
        live = store()
        if live is None:
            return False
        live._notify_sync(queues)
        return True
    return send


# An owed wake-up's NOTIFY (sent outside every producer's transaction) is a transaction
# of its own that writes nothing but its commit: it commits without waiting for the WAL
# flush (synchronous_commit off for this transaction only, no session state: fine behind
# a transaction-mode pooler), so it holds the notify lock only briefly. The jobs it
# announces committed, flushed, before it was sent; a crash can lose only the wake-up,
# which the servers' next poll makes up for.
_NOTIFY_ONE = (f"SELECT set_config('synchronous_commit', 'off', true),"
               f" pg_notify('{CHANNEL}', %s)")
_NOTIFY_MANY = (f"SELECT set_config('synchronous_commit', 'off', true),"
                f" pg_notify('{CHANNEL}', q) FROM unnest(%s::text[]) AS q")


def _notify_plan(queues: list[str]) -> Plan[None]:
    if len(queues) == 1:  # the usual case: no array to encode
        yield one(_NOTIFY_ONE, queues[0])
        return
    yield one(_NOTIFY_MANY, queues)


def _probe_plan(channel: str) -> Plan[None]:
    yield one("SELECT pg_notify(%s, '')", channel)


def _no_tx(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a caller's connection has no transaction for an insert to join: in
    autocommit mode with none open (Django's outside ``atomic()``). The insert is then
    a transaction of its own; otherwise the caller's transaction decides, and kiln
    sends neither BEGIN nor COMMIT."""
    return conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
