"""MySQLStore: kiln on MariaDB 10.6+ and MySQL 8, through asyncmy (docs/adr/0003).

Connections: the store uses the asyncmy (or aiomysql) pool the application passes, or
opens its own of ``max_conns``; either way it keeps one of the pool's connections for
its own writes, which therefore run one at a time in this process, and reads take
any other. The pool needs at least two connections. The kept connection runs in
autocommit at READ COMMITTED (no gap locks, and each statement after a lock wait sees
what the holder committed) with a short lock-wait timeout; a lent connection gets its
session settings back when the store closes.

No LISTEN/NOTIFY: servers on this store are woken through a Bus, or poll.

Owns connections, the sync path and error translation at the boundary; the
statements live in the modules named alike in every dialect (see
docs/adr/0002-store-contract.md): _jobs, _admin, _cluster, _rates, _schema, ...
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncmy  # at import, not at open: it takes ~70 ms to load (Cython modules)

from kiln._aio._portal import Portal
from kiln._errors import ConfigError
from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._job import (
    DEAD_AFTER,
    AdmitResult,
    JobFilter,
    JobResult,
    JobRow,
    KindDeclaration,
    NewJob,
)
from kiln.stores._plan_store import PlanSql, PlanStore
from kiln.stores._protocol import (
    ApplyResult,
    ReleaseResult,
)
from kiln.stores._translator import Translator
from kiln.stores._unnotified import Unnotified
from kiln.stores.mysql import (
    _admin,
    _adopt,
    _cancel,
    _cluster,
    _concurrency,
    _controls,
    _jobs,
    _kept,
    _kinds,
    _rates,
    _schema,
    _sizes,
)
from kiln.stores.mysql._errors import (
    DEADLOCK,
    DUPLICATE_KEY,
    error_code,
    is_driver_error,
    translate,
)
from kiln.stores.mysql._kept import SESSION, Kept, alive, release
from kiln.stores.mysql._plan import (
    Counter,
    Plan,
    Result,
    Step,
    clocked,
    from_db_required,
    run_async,
    run_joined_async,
    run_joined_sync,
    server_is_mariadb,
)

T = TypeVar("T")
DEADLOCK_RETRIES = 5


def connect_args(url: str) -> dict[str, Any]:
    """asyncmy connection arguments of a ``mysql://user:pass@host:port/db`` URL."""
    parts = urlsplit(url)
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError("database_url", _redact(url), "a MySQL URL names its database: "
                          "mysql://user:password@host:3306/dbname")
    query = dict(parse_qsl(parts.query))
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError("database_url", _redact(url), f"bad port: {exc}") from exc
    args: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1", "port": port,
        "user": unquote(parts.username or "root"), "password": unquote(parts.password or ""),
        "db": database, "charset": query.get("charset", "utf8mb4"),
        "connect_timeout": float(query.get("connect_timeout", 10)),
    }
    if "unix_socket" in query:
        args["unix_socket"] = query["unix_socket"]
    return args


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


_SQL: PlanSql[Step, list[Result]] = PlanSql(
    schema=_schema, jobs=_jobs, admin=_admin, cancel=_cancel, cluster=_cluster,
    rates=_rates, kinds=_kinds, controls=_controls, sizes=_sizes,
)


class MySQLStore(Unnotified, PlanStore[Step, list[Result]]):
    """A Store over MariaDB 10.6+ or MySQL 8 (``mysql://`` or ``mariadb://``).

    The operations that only forward to a statement are PlanStore's; having no
    LISTEN/NOTIFY, it says so as Unnotified."""

    database = "MySQL"
    _sql = _SQL

    def __init__(self, url: str, *, pool: Any = None, max_conns: int = 8) -> None:
        self.url = url
        self._args = connect_args(url)
        self._where = f"{self._args['host']}:{self._args['port']}/{self._args['db']}"
        self._errors = Translator(self._where, is_driver_error, translate)
        if pool is not None:
            size = getattr(pool, "maxsize", None)
            if not isinstance(size, int) or size < 2:
                raise ConfigError("pool", f"maxsize={size}", "MySQLStore keeps one of the "
                                  "pool's connections for its own writes: the pool needs "
                                  "maxsize >= 2")
        elif isinstance(max_conns, bool) or not isinstance(max_conns, int) or max_conns < 2:
            raise ConfigError("max_conns", max_conns, "MySQLStore keeps one connection for "
                              "its own writes: max_conns must be >= 2")
        self._lent = pool
        self._pool: Any = pool
        self._max_conns = max_conns
        self._kept: Kept | None = None  # the pool's connection kept for writes
        self._open_lock: asyncio.Lock | None = None
        self._mariadb = True
        self._counter = Counter()
        # Round trips saved on the hot paths: a claim of a queue that came back short
        # first probes without a transaction, unless this store has since seen jobs
        # become available there; a release probes unless a job is known to be due.
        self._empty_queues: set[str] = set()
        self._due_at: float | None = None  # monotonic time the next scheduled job is due
        self._portal: Portal | None = None
        self._portal_lock = threading.Lock()
        self._sync_conn: Any = None
        self._sync_lock: asyncio.Lock | None = None
        self._ahead = 0.0  # seconds the session clock runs ahead: clock_shift, tests only

    def connections(self) -> int:
        """The pool's connections (a lent pool's: its other users' too) and the sync one."""
        pool = self._pool
        held = int(getattr(pool, "size", 0)) if pool is not None else 0
        return held + int(self._sync_conn is not None)

    # lifecycle -----------------------------------------------------------------------
    async def open(self) -> None:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._kept is not None:
                return
            with self._errors("open"):
                if self._pool is None:
                    self._pool = await asyncmy.create_pool(
                        minsize=1, maxsize=self._max_conns, autocommit=True,
                        init_command=SESSION, **self._args,
                    )
                kept = _kept.join(self._pool, lent=self._lent is not None)
                try:
                    async with kept.lock:
                        self._mariadb = server_is_mariadb(await kept.get())
                except BaseException:
                    await _kept.leave(kept)
                    raise
                self._kept = kept

    async def close(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            await _kept.leave(kept)
        if self._lent is None and self._pool is not None:
            pool, self._pool = self._pool, None
            pool.close()
            await pool.wait_closed()
        await self._close_sync()
        for _ in range(2):  # let closed transports finish closing before the loop may end
            await asyncio.sleep(0)

    def query_count(self) -> int:
        return self._counter.value

    # running plans -------------------------------------------------------------------
    async def _write(
        self, operation: str, factory: Callable[[], Plan[T]], *, tx: bool = False,
        retry: tuple[int, ...] = (DEADLOCK,),
    ) -> T:
        """Run a plan on the kept connection, one at a time; retry deadlock victims (the
        server rolled their transaction back) and the errors in ``retry``. ``tx`` is for
        the dialects that frame a plan's transaction here: a MySQL plan frames its own
        (``Step.begin``)."""
        if self._kept is None:
            await self.open()
        kept = self._kept
        assert kept is not None
        async with kept.lock:
            with self._errors(operation):
                for attempt in range(DEADLOCK_RETRIES):
                    try:
                        conn = await kept.get()
                        plan = self._clocked(factory())
                        return await run_async(conn, plan, self._counter, own=True)
                    except Exception as exc:
                        await kept.discard_if_dead()
                        if error_code(exc) in retry and attempt + 1 < DEADLOCK_RETRIES:
                            await asyncio.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
                            continue
                        raise
                    except BaseException:
                        await kept.discard_if_dead()
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, operation: str, make: Callable[[], Plan[T]]) -> T:
        """Run a read-only plan on any pooled connection other than the kept one."""
        return await self._apart(operation, make, commit=False)

    async def _beat(self, operation: str, make: Callable[[], Plan[T]]) -> T:
        """A heartbeat or the leader's lease, on a pooled connection: not in line behind
        the kept connection's writes, one of which may wait on a user's row lock for
        up to innodb_lock_wait_timeout."""
        return await self._apart(operation, make, commit=True)

    async def _apart(self, operation: str, make: Callable[[], Plan[T]], *, commit: bool) -> T:
        if self._kept is None:
            await self.open()
        with self._errors(operation):
            # the pool it came from: close() drops self._pool at once and then waits for
            # every connection to come back to it (given back to None, this one never
            # did, and close() hung: a dashboard closed during a slow read)
            pool = self._pool
            conn = await pool.acquire()
            try:
                result = await run_async(conn, self._clocked(make()), self._counter, own=True)
                if not conn.get_autocommit():  # a lent pool's connection
                    await (conn.commit() if commit else conn.rollback())
                return result
            finally:
                await release(pool, conn)

    def clock_shift(self, seconds: float) -> None:
        """Tests only: from now on, this store's statements see the database clock
        ``seconds`` further ahead (cumulative). The database clock still decides: the
        shift is added to the server's own time in each session (SET timestamp)."""
        self._ahead += seconds

    def _clocked(self, plan: Plan[T]) -> Plan[T]:
        return clocked(plan, self._ahead) if self._ahead else plan

    # schema --------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        try:
            return await self._write("migrate", _schema.migrate)
        finally:
            if self._kept is not None:  # a closed connection released the lock already
                await self._write("migrate", _schema.unlock)

    async def now(self) -> datetime:
        return from_db_required(await self._read("now", _schema.now))

    # jobs ----------------------------------------------------------------------------
    async def job_insert_many(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is not None:
            if _is_async(conn):
                with self._errors("job_insert"):  # the caller's transaction: it commits
                    plan = _jobs.insert(jobs, server_is_mariadb(conn))
                    return await run_joined_async(conn, plan, self._counter)
            return self.job_insert_many_sync(jobs, conn)
        ids = await self._write("job_insert", lambda: _jobs.insert(jobs, self._mariadb))
        self._empty_queues.difference_update(j.queue for j in jobs)
        return ids

    def job_insert_many_sync(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]:
        if conn is None:
            return self._sync_portal().run(self._on_sync_conn(
                "job_insert", lambda c: _jobs.insert(jobs, server_is_mariadb(c))
            ))
        if _is_async(conn):
            raise TypeError("an async connection needs the async enqueue (aenqueue)")
        if not callable(getattr(conn, "cursor", None)) or not callable(
            getattr(conn, "commit", None)
        ):
            raise TypeError(
                f"MySQLStore joins only a MySQL DB-API connection's transaction (PyMySQL, "
                f"mysqlclient, ...), not {type(conn).__name__}"
            )
        with self._errors("job_insert"):
            plan = _jobs.insert(jobs, server_is_mariadb(conn))
            return run_joined_sync(conn, plan, self._counter)

    def _sync_portal(self) -> Portal:
        with self._portal_lock:  # several threads may enqueue at once
            if self._portal is None:
                self._portal = Portal("kiln-mysql-sync")
            return self._portal

    async def _on_sync_conn(self, operation: str, factory: Callable[[Any], Plan[T]]) -> T:
        """Sync calls without a connection: one private connection on the portal's
        loop (a pool belongs to the loop that made it); a deadlock victim runs again,
        as in _write."""
        if self._sync_lock is None:
            self._sync_lock = asyncio.Lock()
        async with self._sync_lock:
            with self._errors(operation):
                for attempt in range(DEADLOCK_RETRIES):
                    if self._sync_conn is None or not alive(self._sync_conn):
                        self._sync_conn = await asyncmy.connect(
                            autocommit=True, init_command=SESSION, **self._args
                        )
                    conn = self._sync_conn
                    try:
                        return await run_async(conn, factory(conn), self._counter, own=True)
                    except Exception as exc:
                        if error_code(exc) != DEADLOCK or attempt + 1 == DEADLOCK_RETRIES:
                            raise
                        await asyncio.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _close_sync(self) -> None:
        portal, self._portal = self._portal, None
        if portal is None:
            return
        conn, self._sync_conn = self._sync_conn, None

        def shut() -> None:
            if conn is not None:
                portal.run(_quit(conn), timeout=5)
            portal.close()

        await asyncio.get_running_loop().run_in_executor(None, shut)

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        limited: bool = False, keys: bool = True,
    ) -> list[JobRow]:
        if limited:
            return await self._write(
                "job_claim",
                lambda: _concurrency.claim(queue, list(kinds), limit, server_id, keys),
            )
        probe = queue in self._empty_queues
        jobs = await self._write(
            "job_claim", lambda: _jobs.claim(queue, list(kinds), limit, server_id, probe)
        )
        if len(jobs) < limit:
            self._empty_queues.add(queue)
        else:
            self._empty_queues.discard(queue)
        return jobs

    async def concurrency_declare(
        self, limits: Mapping[str, int], server_id: str | None = None
    ) -> None:
        await self._write("concurrency_declare",
                          lambda: _concurrency.declare(limits, server_id))

    async def concurrency_sweep(self, dead_after: float) -> list[str]:
        return await self._write("concurrency_sweep", lambda: _concurrency.sweep(dead_after))

    async def concurrency_keys_prune(self, idle_for: float, limit: int) -> int:
        return await self._write("concurrency_keys_prune",
                                 lambda: _concurrency.keys_prune(idle_for, limit))

    async def concurrency_remove(self, key: str, actor: str) -> tuple[int | None, list[str]]:
        return await self._write("concurrency_remove", lambda: _concurrency.remove(key, actor))

    async def concurrency_in_use(self) -> dict[str, int]:
        return await self._read("concurrency_in_use", _concurrency.in_use)

    async def jobs_unkey(self, kinds: Sequence[str]) -> dict[str, int]:
        if not await self._read("jobs_unkey", lambda: _adopt.unkey_probe(kinds)):
            return {}
        released = await self._write("jobs_unkey", lambda: _adopt.unkey(kinds))
        self._empty_queues.difference_update(released)
        return released

    async def concurrency_resize(self, limits: Mapping[str, int]) -> int:
        if not await self._read("concurrency_resize", lambda: _adopt.resize_probe(limits)):
            return 0
        return await self._write("concurrency_resize", lambda: _adopt.resize(limits))

    async def jobs_waiting(self, kind: str, after_id: int, limit: int) -> list[WaitingJob]:
        return await self._read("jobs_waiting", lambda: _adopt.waiting(kind, after_id, limit))

    async def jobs_undeclared(self, kinds: Sequence[str], limit: int) -> list[WaitingJob]:
        return await self._read("jobs_undeclared", lambda: _adopt.undeclared(kinds, limit))

    async def jobs_rekey(self, keys: Mapping[int, str], maxes: Mapping[str, int],
                         running_on: str | None = None) -> int:
        return await self._write("jobs_rekey", lambda: _adopt.rekey(keys, maxes, running_on))

    async def jobs_adopt(self, adoption: Adoption) -> dict[str, int]:
        released = await self._write("jobs_adopt", lambda: _adopt.adopt(adoption))
        self._empty_queues.difference_update(released)
        return released

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        first, again = await self._write(
            "job_results_apply", lambda: _jobs.results_apply(results)
        )
        released = dict(first.released)
        applied = first.applied_ids
        if again:  # completions of jobs with dependents (or fenced ones)
            more = await self._write(
                "job_results_apply", lambda: _jobs.results_release(again)
            )
            applied |= more.applied_ids
            _jobs.merge(released, more.released)
        if len(applied) < len(results):  # some were fenced off: cancelled while running?
            await self._write("job_results_apply", lambda: _jobs.attempts_end(results))
        self._empty_queues.difference_update(released)
        return ApplyResult(applied=len(applied), released=released, applied_ids=applied)

    async def jobs_release_due(self) -> ReleaseResult:
        probe = self._due_at is None or time.monotonic() < self._due_at
        result = await self._write("jobs_release_due", lambda: _jobs.release_due(probe))
        self._due_at = None if result.next_at is None else time.monotonic() + result.next_at
        self._empty_queues.difference_update(result.released)
        return result

    def kind_declarations_sync(self) -> list[KindDeclaration]:
        return self._sync_portal().run(
            self._on_sync_conn("kind_declarations", lambda c: _kinds.newest())
        )

    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        return await self._write(
            "cron_enqueue", lambda: _cluster.cron_enqueue(name, slot, job, self._mariadb),
            retry=(DEADLOCK, DUPLICATE_KEY),
        )

    # what MySQL adds around the plain forwards: the claim hints of ``_empty_queues``
    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        # A holder of a unique key enqueued but not committed is not seen by the check
        # that leaves a held key's job where it is; the update then waits for it and
        # fails with a duplicate once it commits. Run again, the check sees the holder.
        n = await self._write(
            "jobs_requeue", lambda: _admin.requeue(filter, dead_after),
            retry=(DEADLOCK, DUPLICATE_KEY),
        )
        self._empty_queues.clear()
        return n

    async def jobs_admit(
        self, key: str, max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> AdmitResult:
        result = await super().jobs_admit(key, max_batch, queues, ahead)
        self._empty_queues.difference_update(a.queue for a in result.admitted)
        return result

    async def jobs_admit_keys(
        self, keys: Sequence[str], max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> dict[str, AdmitResult]:
        results = await super().jobs_admit_keys(keys, max_batch, queues, ahead)
        for result in results.values():
            self._empty_queues.difference_update(a.queue for a in result.admitted)
        return results

def _is_async(conn: Any) -> bool:
    """An asyncmy or aiomysql connection (their methods are coroutines)."""
    root = type(conn).__module__.split(".")[0]
    return root in ("asyncmy", "aiomysql") or inspect.iscoroutinefunction(
        getattr(conn, "commit", None)
    )


async def _quit(conn: Any) -> None:
    try:
        await conn.ensure_closed()
    except Exception:
        conn.close()
    await asyncio.sleep(0)
