"""Plans: a store operation as a generator of statements, run by a sync or async driver.

An operation is written once as a generator that yields a ``Step`` (statements sent
together) and receives one ``Result`` per statement. The async store, the sync enqueue
path and a caller's own connection all run the same plan; only the execution differs:

- on kiln's own connections (autocommit, READ COMMITTED: see _store) the statements
  of a step go in one round trip (asyncmy and aiomysql always enable
  multi-statements), framed by START TRANSACTION / COMMIT when the plan asks for a
  transaction;
- on a caller's connection each statement is sent on its own and nothing is framed:
  the caller's transaction decides, so the job exists if and only if it commits.

Owns the execution of plans (the errors they raise are translated in _errors).
Knows nothing about individual operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Generator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from kiln.stores._migrations import Runner, plan_of
from kiln.stores.mysql._errors import is_disconnect

T = TypeVar("T")
Row = tuple[Any, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Stmt:
    sql: str
    params: Sequence[Any] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    rows: list[Row]
    rowcount: int
    lastrowid: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """Statements sent together. ``begin`` opens the plan's transaction before them;
    ``last`` says the plan ends here, so COMMIT rides in the same round trip."""

    stmts: tuple[Stmt, ...]
    begin: bool = False
    last: bool = False


Plan = Generator[Step, list[Result], T]


def step(*stmts: Stmt, begin: bool = False, last: bool = False) -> Step:
    return Step(stmts=stmts, begin=begin, last=last)


def one(sql: str, *params: Any) -> Step:
    return Step(stmts=(Stmt(sql, params),), last=True)


# conversions --------------------------------------------------------------------------
def to_db(value: datetime) -> datetime:
    """An aware datetime as the naive UTC value a DATETIME(6) column holds."""
    if value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


def from_db(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def from_db_required(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def micros(seconds: float) -> int:
    """Seconds as whole microseconds, for ``INTERVAL %s MICROSECOND``."""
    return round(seconds * 1_000_000)


def marks(n: int) -> str:
    return ",".join(["%s"] * n)


def _tuple(row: Any) -> Row:
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


# running ------------------------------------------------------------------------------
class Counter:
    """Statements sent, for the idle-cost measurement."""

    def __init__(self) -> None:
        self.value = 0


_TX_BEGIN = (Stmt("START TRANSACTION"),)
_COMMIT = Stmt("COMMIT")


def _frame(st: Step, in_tx: bool) -> tuple[tuple[Stmt, ...], int]:
    """The statements to send for ``st`` and the index of its first own statement."""
    head = _TX_BEGIN if st.begin and not in_tx else ()
    tail = (_COMMIT,) if st.last and (in_tx or st.begin) else ()
    return (*head, *st.stmts, *tail), len(head)


async def run_async(conn: Any, plan: Plan[T], counter: Counter, *, own: bool) -> T:
    """Run ``plan`` on an asyncmy/aiomysql connection.

    ``own``: kiln's connection in autocommit mode (steps go in one trip and may frame a
    transaction); otherwise the caller's, where statements go one by one, unframed.
    """
    in_tx = False
    try:
        st = next(plan)
        while True:
            if own:
                stmts, start = _frame(st, in_tx)
                # open until the step has run: a failed last step (before its COMMIT)
                # leaves the transaction for _recover to roll back, not to the pool
                in_tx = in_tx or st.begin
                results = await _exec_async_multi(conn, stmts, counter)
                in_tx = in_tx and not st.last
                results = results[start : start + len(st.stmts)]
            else:
                results = [await _exec_async_one(conn, s, counter) for s in st.stmts]
            st = plan.send(results)
    except StopIteration as stop:
        if in_tx:
            in_tx = False
            await _exec_async_multi(conn, (_COMMIT,), counter)
        return stop.value  # type: ignore[no-any-return]
    except BaseException as exc:
        if own:
            await _recover(conn, exc, in_tx)
        raise


async def _recover(conn: Any, exc: BaseException, in_tx: bool) -> None:
    """After a failed step on kiln's connection: roll back a transaction left open, or
    close the connection when its state is unknown (cancelled mid-protocol, broken)."""
    if isinstance(exc, asyncio.CancelledError) or is_disconnect(exc):
        conn.close()
        return
    if in_tx:
        try:
            await conn.rollback()
        except Exception:
            conn.close()


async def _exec_async_multi(conn: Any, stmts: tuple[Stmt, ...], counter: Counter) -> list[Result]:
    counter.value += len(stmts)
    sql = ";\n".join(s.sql for s in stmts)
    params = [p for s in stmts for p in s.params]
    results: list[Result] = []
    async with conn.cursor() as cur:
        await cur.execute(sql, params or None)
        while True:
            rows = [_tuple(r) for r in await cur.fetchall()] if cur.description else []
            results.append(Result(rows, cur.rowcount, cur.lastrowid))
            if len(results) >= len(stmts) or not await cur.nextset():
                break
    return results


async def _exec_async_one(conn: Any, s: Stmt, counter: Counter) -> Result:
    counter.value += 1
    async with conn.cursor() as cur:
        await cur.execute(s.sql, tuple(s.params) or None)
        rows = [_tuple(r) for r in await cur.fetchall()] if cur.description else []
        return Result(rows, cur.rowcount, cur.lastrowid)


def run_sync(conn: Any, plan: Plan[T], counter: Counter) -> T:
    """Run ``plan`` on a caller's DB-API connection (PyMySQL, mysqlclient, ...), inside
    whatever transaction the caller has open."""
    try:
        st = next(plan)
        while True:
            st = plan.send([_exec_sync_one(conn, s, counter) for s in st.stmts])
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


# A caller's connection: the insert joins its transaction inside a savepoint, so a
# failure part way (a lock wait timeout, which MySQL rolls back one statement of) takes
# the insert's earlier rows with it even if the caller then commits; with autocommit on
# and no transaction open, the insert is a transaction of its own. A connection whose
# state neither its driver nor the server tells (mysqlclient with autocommit on, on
# MySQL 8, which has no @@in_transaction) runs it unframed, as before: framing it
# wrongly would either commit the caller's transaction (START TRANSACTION) or fail
# after the insert (RELEASE of a savepoint that autocommit dropped).
Frame = tuple[str, str, str]
_JOINED: Frame = ("SAVEPOINT kiln_insert", "RELEASE SAVEPOINT kiln_insert",
                  "ROLLBACK TO SAVEPOINT kiln_insert")
_OWN: Frame = ("START TRANSACTION", "COMMIT", "ROLLBACK")
IN_TRANSACTION = Stmt("SELECT @@in_transaction")  # MariaDB's; MySQL 8 has none


def _known_in_tx(conn: Any) -> bool | None:
    """Whether the caller's connection is in a transaction, as its driver tracks it;
    None when the driver cannot tell (then the server is asked)."""
    get = getattr(conn, "get_autocommit", None)
    if callable(get) and get() is False:
        return True  # the next statement opens the caller's transaction, if none is open
    status = getattr(conn, "server_status", None)
    if isinstance(status, int):
        return bool(status & 1)  # SERVER_STATUS_IN_TRANS
    return None


def _frame_of(in_tx: bool | None) -> Frame | None:
    return None if in_tx is None else _JOINED if in_tx else _OWN


async def run_joined_async(conn: Any, plan: Plan[T], counter: Counter) -> T:
    """Run ``plan`` on a caller's asyncmy/aiomysql connection, all or none."""
    in_tx = _known_in_tx(conn)
    if in_tx is None:
        with contextlib.suppress(Exception):
            in_tx = bool((await _exec_async_one(conn, IN_TRANSACTION, counter)).rows[0][0])
    frame = _frame_of(in_tx)
    if frame is None:
        return await run_async(conn, plan, counter, own=False)
    begin, end, undo = frame
    await _exec_async_one(conn, Stmt(begin), counter)
    try:
        result = await run_async(conn, plan, counter, own=False)
    except BaseException:
        # a deadlock rolled the whole transaction back already: nothing to undo then
        with contextlib.suppress(Exception):
            await _exec_async_one(conn, Stmt(undo), counter)
        raise
    await _exec_async_one(conn, Stmt(end), counter)
    return result


def run_joined_sync(conn: Any, plan: Plan[T], counter: Counter) -> T:
    """Run ``plan`` on a caller's DB-API connection (PyMySQL, mysqlclient, ...), all or
    none: inside its transaction, or as one of its own when it has none open."""
    in_tx = _known_in_tx(conn)
    if in_tx is None:
        with contextlib.suppress(Exception):
            in_tx = bool(_exec_sync_one(conn, IN_TRANSACTION, counter).rows[0][0])
    frame = _frame_of(in_tx)
    if frame is None:
        return run_sync(conn, plan, counter)
    begin, end, undo = frame
    _exec_sync_one(conn, Stmt(begin), counter)
    try:
        result = run_sync(conn, plan, counter)
    except BaseException:
        # a deadlock rolled the whole transaction back already: nothing to undo then
        with contextlib.suppress(Exception):
            _exec_sync_one(conn, Stmt(undo), counter)
        raise
    _exec_sync_one(conn, Stmt(end), counter)
    return result


def _exec_sync_one(conn: Any, s: Stmt, counter: Counter) -> Result:
    counter.value += 1
    cur = conn.cursor()
    try:
        cur.execute(s.sql, tuple(s.params) or None)
        rows = [_tuple(r) for r in cur.fetchall()] if cur.description else []
        return Result(rows, cur.rowcount, cur.lastrowid)
    finally:
        cur.close()


def server_is_mariadb(conn: Any) -> bool:
    """Whether ``conn`` talks to MariaDB (which has INSERT ... RETURNING)."""
    info = getattr(conn, "get_server_info", None)
    try:
        version = str(info() if callable(info) else getattr(conn, "server_version", ""))
    except Exception:
        return False
    return "mariadb" in version.lower()


def batches(runner: Runner[T]) -> Plan[T]:
    """A statement-batch runner (the migration runner) as a plan: a batch per step."""
    return plan_of(
        runner, lambda batch: Step(tuple(Stmt(sql) for sql in batch)),
        lambda out: [r.rows[0][0] if r.rows else None for r in out],
    )


# the session clock, moved ahead for tests (MySQLStore.clock_shift): UTC_TIMESTAMP and
# NOW read the session's timestamp, which SET fixes; SYSDATE keeps the server's clock
SET_CLOCK = "SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + %s"


def clocked(plan: Plan[T], ahead: float) -> Plan[T]:
    """``plan`` with the session clock set ``ahead`` seconds past the server's before
    its first step (tests only: the conformance suite's clock)."""
    try:
        st = next(plan)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    out = yield Step((Stmt(SET_CLOCK, (ahead,)), *st.stmts), begin=st.begin, last=st.last)
    results = out[1:]
    while True:
        try:
            st = plan.send(results)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        results = yield st
