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

Owns the execution of plans and the translation of driver errors into kiln's errors.
Knows nothing about individual operations.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Generator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from kiln._errors import NotMigratedError, StoreError, UnreachableError

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
                in_tx = (in_tx or st.begin) and not st.last
                results = await _exec_async_multi(conn, stmts, counter)
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
            results: list[Result] = []
            for s in st.stmts:
                counter.value += 1
                cur = conn.cursor()
                try:
                    cur.execute(s.sql, tuple(s.params) or None)
                    rows = [_tuple(r) for r in cur.fetchall()] if cur.description else []
                    results.append(Result(rows, cur.rowcount, cur.lastrowid))
                finally:
                    cur.close()
            st = plan.send(results)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def server_is_mariadb(conn: Any) -> bool:
    """Whether ``conn`` talks to MariaDB (which has INSERT ... RETURNING)."""
    info = getattr(conn, "get_server_info", None)
    try:
        version = str(info() if callable(info) else getattr(conn, "server_version", ""))
    except Exception:
        return False
    return "mariadb" in version.lower()


# errors -------------------------------------------------------------------------------
NO_SUCH_TABLE = 1146
DEADLOCK = 1213
DUPLICATE_KEY = 1062
LOCK_WAIT_TIMEOUT = 1205
# can't connect, unknown host, gone away, lost, access denied, unknown database,
# too many connections, server shutting down, connection killed
_UNREACHABLE = {2002, 2003, 2005, 2006, 2013, 2055, 1045, 1049, 1040, 1053, 1927, 4031}


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


_DRIVERS = ("asyncmy", "aiomysql", "pymysql", "MySQLdb", "mysql")


def is_driver_error(exc: BaseException) -> bool:
    """A MySQL driver error or a socket-level failure: what the store translates."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] in _DRIVERS


def is_disconnect(exc: BaseException) -> bool:
    code = error_code(exc)
    return isinstance(exc, OSError | TimeoutError) or (code is not None and code >= 2000) or (
        code in _UNREACHABLE
    )


def translate(operation: str, where: str, exc: BaseException) -> StoreError:
    """A kiln error for a driver error, to be raised ``from`` it."""
    code = error_code(exc)
    text = str(exc.args[1]) if len(getattr(exc, "args", ())) > 1 else str(exc)
    text = text.strip() or type(exc).__name__
    if code == NO_SUCH_TABLE:
        return NotMigratedError(
            operation, f"the kiln schema is missing at {where}: run `kiln migrate` ({text})"
        )
    if isinstance(exc, OSError | TimeoutError) or code in _UNREACHABLE or (
        code is not None and 2000 <= code < 3000
    ):
        return UnreachableError(operation, f"cannot reach MySQL at {where}: {text}")
    return StoreError(operation, f"{text} (MySQL error {code})" if code else text)
