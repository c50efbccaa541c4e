"""Plans: a store operation as a generator of statements, run by a sync or async driver.

An operation is written once as a generator that yields a ``Step`` (one or more
statements, sent together in one pipeline) and receives the rows of each statement.
The async store, the sync enqueue path and a caller's own connection all run the
same plan, so the statement builder is shared and only the execution differs.

Owns the execution of plans (the errors they raise are translated in _errors).
Knows nothing about individual operations.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.rows import tuple_row

from kiln.stores._migrations import Runner, plan_of

T = TypeVar("T")
Row = tuple[Any, ...]
Rows = list[Row]


@dataclasses.dataclass(frozen=True, slots=True)
class Stmt:
    sql: str
    params: Sequence[Any] = ()
    prepare: bool | None = None  # True for hot statements: prepared on first use
    binary: bool = False  # rows in binary format (cheaper timestamps on both sides)
    # instead of params, for %(name)b placeholders (one value referenced more than once)
    named: Mapping[str, Any] | None = None

    def args(self) -> Sequence[Any] | Mapping[str, Any] | None:
        return self.named if self.named is not None else self.params or None


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """Statements sent together; ``last`` lets the driver append COMMIT to the same trip.

    ``last`` ends the transaction: a step after it runs on its own (autocommit, or
    ``atomic``). A plan that must be all or none (an insert: kiln._jobs.insert) marks
    only its final step ``last``, or none (the driver then commits after the final
    step); whether the plan gets BEGIN at all is decided by its first step.

    ``atomic``: a step of a plan whose first step ran alone (as its own transaction)
    that must be a transaction of its own: the driver frames it with BEGIN and COMMIT
    in the same trip. On a caller's connection it simply joins the caller's transaction.
    """

    stmts: tuple[Stmt, ...]
    last: bool = False
    atomic: bool = False


def step(*stmts: Stmt, last: bool = False) -> Step:
    return Step(stmts=stmts, last=last)


def atomic(*stmts: Stmt) -> Step:
    return Step(stmts=stmts, last=True, atomic=True)


Plan = Generator[Step, list[Rows], T]
Qualify = Callable[[str], str]  # a statement for the store's schema (_settings.Qualifier)


def one(sql: str, *params: Any, prepare: bool | None = None) -> Step:
    return Step(stmts=(Stmt(sql, params, prepare),), last=True)


class Counter:
    """Counts statements sent, for the idle-cost measurement."""

    def __init__(self) -> None:
        self.value = 0


_BEGIN = Stmt("BEGIN")
_COMMIT = Stmt("COMMIT")


def needs_tx(st: Step) -> bool:
    """A plan of one single statement is atomic without BEGIN/COMMIT."""
    return not (st.last and len(st.stmts) == 1)


def _frame(st: Step, tx: bool, first: bool, own: bool) -> tuple[Stmt, ...]:
    stmts = st.stmts
    if own and not tx and st.atomic:
        return (_BEGIN, *stmts, _COMMIT)
    if tx and first:
        stmts = (_BEGIN, *stmts)
    if tx and st.last:
        stmts = (*stmts, _COMMIT)
    return stmts


def _unframe(stmts: tuple[Stmt, ...], results: list[Rows], st: Step) -> list[Rows]:
    start = len(stmts) - len(st.stmts) - (1 if stmts[-1] is _COMMIT else 0)
    return results[start : start + len(st.stmts)]


async def run_async(
    conn: psycopg.AsyncConnection[Any], plan: Plan[T], counter: Counter, *, tx: bool,
    prepared: bool = True, qualify: Qualify | None = None,
) -> T:
    """Run ``plan`` on an autocommit connection, inside BEGIN/COMMIT when ``tx``.

    ``tx`` False: the caller owns the transaction (or there is none to own).
    ``prepared`` False: no statement is prepared, whatever the plan asks (behind a
    transaction-mode pooler, where the next transaction may run on another server
    connection). ``qualify``: each statement names the store schema's tables.
    """
    own, first, framed = tx, True, False
    try:
        st = next(plan)
        tx = tx and needs_tx(st)
        while True:
            stmts = _frame(st, tx, first, own)
            first, framed = False, tx or (own and st.atomic)
            results = await _exec_async(conn, stmts, counter, prepared, qualify)
            st = plan.send(_unframe(stmts, results, st))
    except StopIteration as stop:
        if tx and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            counter.value += 1
            await conn.execute("COMMIT")
        return stop.value  # type: ignore[no-any-return]
    except BaseException:
        if framed and conn.info.transaction_status in (
            pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR
        ):
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise


async def _exec_async(
    conn: psycopg.AsyncConnection[Any], stmts: tuple[Stmt, ...], counter: Counter,
    prepared: bool = True, qualify: Qualify | None = None,
) -> list[Rows]:
    counter.value += len(stmts)
    if len(stmts) == 1:
        s = stmts[0]
        cur = conn.cursor(row_factory=tuple_row, binary=s.binary)
        await cur.execute(s.sql if qualify is None else qualify(s.sql), s.args(),
                          prepare=s.prepare if prepared else False)
        return [await cur.fetchall() if _has_rows(cur) else []]
    cursors = []
    async with conn.pipeline():
        for s in stmts:
            cur = conn.cursor(row_factory=tuple_row, binary=s.binary)
            await cur.execute(s.sql if qualify is None else qualify(s.sql), s.args(),
                              prepare=s.prepare if prepared else False)
            cursors.append(cur)
    return [await c.fetchall() if _has_rows(c) else [] for c in cursors]


def _has_rows(cur: psycopg.AsyncCursor[Row] | psycopg.Cursor[Row]) -> bool:
    """Whether the statement returned rows (``cur.description`` says so too, but builds
    a Column per column to say it: a tenth of a single enqueue's store CPU)."""
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


_TUPLES_OK = pq.ExecStatus.TUPLES_OK


def run_sync(
    conn: psycopg.Connection[Any], plan: Plan[T], counter: Counter, *, tx: bool,
    prepared: bool = True, qualify: Qualify | None = None,
) -> T:
    """The sync twin of run_async (enqueue from sync code)."""
    own, first, framed = tx, True, False
    try:
        st = next(plan)
        tx = tx and needs_tx(st)
        while True:
            stmts = _frame(st, tx, first, own)
            first, framed = False, tx or (own and st.atomic)
            results = _exec_sync(conn, stmts, counter, prepared, qualify)
            st = plan.send(_unframe(stmts, results, st))
    except StopIteration as stop:
        if tx and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            counter.value += 1
            conn.execute("COMMIT")
        return stop.value  # type: ignore[no-any-return]
    except BaseException:
        if framed and conn.info.transaction_status in (
            pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR
        ):
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise


def _exec_sync(
    conn: psycopg.Connection[Any], stmts: tuple[Stmt, ...], counter: Counter,
    prepared: bool = True, qualify: Qualify | None = None,
) -> list[Rows]:
    counter.value += len(stmts)
    results: list[Rows] = []
    for s in stmts:  # a caller's connection may not want pipeline mode; keep it plain
        cur = conn.cursor(row_factory=tuple_row, binary=s.binary)
        cur.execute(s.sql if qualify is None else qualify(s.sql), s.args(),
                    prepare=s.prepare if prepared else False)
        results.append(cur.fetchall() if _has_rows(cur) else [])
    return results


def batches(runner: Runner[T]) -> Plan[T]:
    """A statement-batch runner (the migration runner) as a plan: a batch per step."""
    return plan_of(
        runner, lambda batch: Step(tuple(Stmt(sql) for sql in batch)),
        lambda out: [rows[0][0] if rows else None for rows in out],
    )
