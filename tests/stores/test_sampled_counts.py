"""MariaDB and SQLite: the capped counts (and the rate keys furthest behind) cost what
the cap allows, not what the table holds, and their estimates are close.

``job_counts(cap=)``, ``job_kind_counts(cap)`` and ``jobs_available_by_kind(cap)`` are
what kilnotel reads every 5 s and the dashboard every few seconds. Counted exactly
(one ``GROUP BY`` over every job of the states asked for) they took 3 to 7.5 s at
3,000,000 (MariaDB) and 10,000,000 (SQLite) jobs waiting (bench/RESULTS.md,
"scale45"). Now each (queue or kind, state) pair is counted up to ``cap + 1`` through
an index and estimated above it from a bounded sample of the ids
(kiln.stores._sample). Here the same reads run on a table of 60,000 jobs and again
after it grew to 240,000: the capped reads' work (SQLite's VM instructions, MariaDB's
handler reads) must stay about the same while the exact reads' grows fourfold; pairs
at or under the cap are exact, the others marked and within 15% of the exact count.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import pytest

from kiln._model._job import JobState
from kiln.stores import store_from_url
from kiln.stores._capped import PAIR_CAP
from kiln.stores._sample import BOUNDS, PER_STRATUM, STRATA, grid
from kiln.stores.mysql import _admin as mysql_admin
from kiln.stores.mysql import _counts as mysql_counts
from kiln.stores.mysql import _rates as mysql_rates
from kiln.stores.mysql._plan import Counter, run_sync
from kiln.stores.sqlite import _admin as sqlite_admin
from kiln.stores.sqlite import _counts as sqlite_counts
from kiln.stores.sqlite import _rates as sqlite_rates
from kiln.testing import migrated_url
from tests.plugins.databases import mysql_connect
from tests.stores.sqlite_steps import counted

SMALL, BIG = 60_000, 240_000
CAP, KIND_CAP = 100, 1000  # the kinds' counts are capped at 100 a pair (_capped.PAIR_CAP)
LIVE = [JobState.AVAILABLE, JobState.SCHEDULED, JobState.FAILED]

# job g: queue q(g % 20), kind k(g % 100) (so each kind lives in one queue), available
# or scheduled by g % 2; besides, 50 available jobs of kind "rare" in q0 and 7 failed
# ones: pairs under every cap, which must stay exact beside the estimated ones
SQLITE_FILL = (
    "WITH RECURSIVE s(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM s WHERE g < {hi})"
    " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, created_at)"
    " SELECT 'q' || (g % 20), 'k' || (g % 100), CASE g % 2 WHEN 0 THEN 'available'"
    " ELSE 'scheduled' END, '{{}}', g, 3, 0 FROM s"
)
SQLITE_FEW = (
    "WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < 56)"
    " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, created_at)"
    " SELECT 'q0', CASE WHEN g < 50 THEN 'rare' ELSE 'k1' END, CASE WHEN g < 50"
    " THEN 'available' ELSE 'failed' END, '{}', 0, 3, 0 FROM s"
)
MYSQL_FILL = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
    " max_attempts, errors, created_at) SELECT CONCAT('q', seq % 20), CONCAT('k', seq % 100),"
    " IF(seq % 2 = 0, 'available', 'scheduled'), '{{}}', '{{}}', '{{}}', UTC_TIMESTAMP(6),"
    " 3, '[]', UTC_TIMESTAMP(6) FROM seq_{lo}_to_{hi}"
)
MYSQL_FEW = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
    " max_attempts, errors, created_at) SELECT 'q0', IF(seq < 50, 'rare', 'k1'),"
    " IF(seq < 50, 'available', 'failed'), '{}', '{}', '{}', UTC_TIMESTAMP(6), 3, '[]',"
    " UTC_TIMESTAMP(6) FROM seq_0_to_56"
)

Reads = dict[str, Callable[[], Any]]


def check(capped: Reads, exact: Reads, size: int) -> None:
    """Under the cap exact and unmarked; over it marked, never below the cap, and close."""
    def close(got: int, want: int) -> bool:
        return abs(got - want) <= 0.15 * want

    counts, want = capped["counts"](), {(c.queue, c.state): c.count for c in exact["counts"]()}
    assert {(c.queue, c.state) for c in counts} == set(want)
    for c in counts:
        n = want[(c.queue, c.state)]
        assert c.estimated == (n > CAP), (c, n)
        assert (c.count > CAP and close(c.count, n)) if c.estimated else c.count == n, (c, n)
    kinds = capped["kinds"]()
    want = {(k, s): n for k, s, n in exact["kinds"]()}
    assert {(c.kind, c.state) for c in kinds} == set(want)
    for c in kinds:
        n = want[(c.kind, c.state)]
        assert c.estimated == (n > PAIR_CAP), (c, n)
        assert close(c.count, n) if c.estimated else c.count == n, (c, n)
    by_kind, want_by_kind = capped["by_kind"](), sorted(exact["by_kind"]())
    assert [(q, k) for q, k, _ in by_kind] == [(q, k) for q, k, _ in want_by_kind]
    for (_, kind, got), (_, _, n) in zip(by_kind, want_by_kind, strict=True):
        assert got == n if n <= CAP else close(got, n), (kind, got, n)
    assert ("q0", "rare", 50) in by_kind
    assert size > STRATA * PER_STRATUM  # the sample reads part of the table, not all


class Table(Protocol):
    """A migrated table of one store: how it grows, what a read costs it, its strata."""

    def fill(self, sql: str) -> None: ...
    def work(self, read: Callable[[], Any]) -> int: ...
    def strata(self) -> int: ...


class SQLiteTable:
    """SQLite: a read's work in hundreds of VM instructions."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def fill(self, sql: str) -> None:
        self.conn.execute(sql)
        self.conn.commit()

    def work(self, read: Callable[[], Any]) -> int:
        return counted(self.conn, read)[0]

    def strata(self) -> int:
        lo, hi = self.conn.execute(BOUNDS).fetchone()
        return len(grid(int(lo), int(hi)))


class MySQLTable:
    """MariaDB: a read's work in rows read (the session's Handler_read counters); the
    store's plans run on this one connection."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.cur = conn, conn.cursor()

    def run(self, plan: Any) -> Any:
        return run_sync(self.conn, plan, Counter())

    def fill(self, sql: str) -> None:
        self.cur.execute(sql)

    def _reads(self) -> int:
        self.cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
        return sum(int(v) for _, v in self.cur.fetchall())

    def work(self, read: Callable[[], Any]) -> int:
        start = self._reads()
        read()
        return self._reads() - start

    def strata(self) -> int:
        self.cur.execute(BOUNDS)
        lo, hi = self.cur.fetchone()
        return len(grid(int(lo), int(hi)))


def bounded(table: Table, capped: Callable[[], Any], exact: Callable[[], Any],
            grow: str) -> None:
    """The capped reads' work after the table grew fourfold (``grow``) stays within 1.5
    times what it was, per stratum of the sample (between STRATA / 2 and STRATA + 1 of
    them, by the span of ids: MariaDB's bulk inserts leave gaps), while the exact reads'
    grows at least threefold; on a small table they can cost more than the exact reads."""
    before = {"capped": table.work(capped), "exact": table.work(exact)}
    cut = table.strata()
    table.fill(grow)
    after = {"capped": table.work(capped), "exact": table.work(exact)}
    assert STRATA // 2 <= table.strata() <= STRATA + 1
    assert after["exact"] >= 3 * before["exact"], (before, after)
    assert after["capped"] * 2 * cut <= before["capped"] * 3 * table.strata(), (before, after)
    assert after["capped"] < after["exact"], (before, after)


def every(reads: Reads) -> Callable[[], list[Any]]:
    return lambda: [read() for read in reads.values()]


@contextlib.contextmanager
def sqlite_table(tmp_path: Path) -> Iterator[SQLiteTable]:
    with migrated_url(directory=tmp_path) as url, contextlib.closing(
            sqlite3.connect(urlsplit(url).path[1:])) as conn:
        yield SQLiteTable(conn)


@contextlib.contextmanager
def mysql_table(url: str) -> Iterator[MySQLTable]:
    async def migrated() -> None:
        store = store_from_url(url)
        await store.open()
        await store.migrate()
        await store.close()

    asyncio.run(migrated())
    with mysql_connect(url) as conn:
        yield MySQLTable(conn)


def test_sqlite_capped_counts_are_bounded_and_close(tmp_path: Path) -> None:
    with sqlite_table(tmp_path) as table:
        table.fill(SQLITE_FILL.format(lo=0, hi=SMALL - 1))
        table.fill(SQLITE_FEW)
        conn = table.conn
        capped: Reads = {
            "counts": lambda: sqlite_counts.state_counts(conn, LIVE, CAP),
            "kinds": lambda: sqlite_counts.kind_counts(conn, KIND_CAP),
            "by_kind": lambda: sqlite_counts.available_by_kind(conn, CAP),
        }
        exact: Reads = {
            "counts": lambda: sqlite_admin.state_counts(conn, LIVE),
            "kinds": lambda: sqlite_admin.counts_by_kind(conn),
            "by_kind": lambda: sqlite_admin.available_by_kind(conn),
        }
        check(capped, exact, SMALL)
        bounded(table, every(capped), every(exact), SQLITE_FILL.format(lo=SMALL, hi=BIG - 1))
        check(capped, exact, BIG)


def test_mysql_capped_counts_are_bounded_and_close(mysql_url: str) -> None:
    with mysql_table(mysql_url) as table:
        table.fill(MYSQL_FILL.format(lo=0, hi=SMALL - 1))
        table.fill(MYSQL_FEW)
        run = table.run
        capped: Reads = {
            "counts": lambda: run(mysql_counts.state_counts(LIVE, CAP)),
            "kinds": lambda: run(mysql_counts.kind_counts(KIND_CAP)),
            "by_kind": lambda: run(mysql_counts.available_by_kind(CAP)),
        }
        exact: Reads = {
            "counts": lambda: run(mysql_admin.state_counts(LIVE)),
            "kinds": lambda: run(mysql_admin.counts_by_kind()),
            "by_kind": lambda: run(mysql_admin.available_by_kind()),
        }
        check(capped, exact, SMALL)
        bounded(table, every(capped), every(exact), MYSQL_FILL.format(lo=SMALL, hi=BIG - 1))
        check(capped, exact, BIG)


@pytest.mark.parametrize("cap", [1, CAP])
def test_an_empty_table_counts_nothing(tmp_path: Path, cap: int) -> None:
    with sqlite_table(tmp_path) as table:
        conn = table.conn
        assert sqlite_counts.state_counts(conn, None, cap) == []
        assert sqlite_counts.kind_counts(conn, cap) == []
        assert sqlite_counts.available_by_kind(conn, cap) == []
        assert sqlite_counts.sample(conn, ("queue", "state")).whole


# pending jobs of 50 rate keys, due; key r7 also has 30 jobs not due yet (not counted)
SQLITE_PENDING = (
    "WITH RECURSIVE s(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM s WHERE g < {hi})"
    " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, created_at,"
    " rate_key) SELECT 'q', 'k', 'pending', '{{}}', CASE WHEN g < 30 THEN 4e9 ELSE 0 END,"
    " 3, 0, 'r' || CASE WHEN g < 30 THEN 7 ELSE g % 50 END FROM s"
)
MYSQL_PENDING = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
    " max_attempts, errors, created_at, rate_key) SELECT 'q', 'k', 'pending', '{{}}', '{{}}',"
    " '{{}}', IF(seq < 30, UTC_TIMESTAMP(6) + INTERVAL 1 DAY, UTC_TIMESTAMP(6)), 3, '[]',"
    " UTC_TIMESTAMP(6), CONCAT('r', IF(seq < 30, 7, seq % 50)) FROM seq_{lo}_to_{hi}"
)


def rate_check(capped: Callable[[], Any], exact: Callable[[], Any]) -> None:
    """The same 20 keys; each past the cap marked by its figure (never below cap + 1)
    and within 15% of the exact count."""
    got, want = capped(), dict((k, n) for k, _, n in exact())
    assert len(got) == 20 and {k for k, _, _ in got} <= set(want)
    for key, _, n in got:
        assert n > CAP and abs(n - want[key]) <= 0.15 * want[key], (key, n, want[key])


def test_sqlite_rate_backlog_is_bounded_and_close(tmp_path: Path) -> None:
    with sqlite_table(tmp_path) as table:
        table.fill(SQLITE_PENDING.format(lo=0, hi=SMALL - 1))
        conn = table.conn

        def capped() -> Any:
            return sqlite_counts.rate_keys_backlog(conn, 20, CAP)

        def exact() -> Any:
            return sqlite_rates.rate_keys_backlog(conn, 100)

        rate_check(capped, exact)
        bounded(table, capped, exact, SQLITE_PENDING.format(lo=SMALL, hi=BIG - 1))
        rate_check(capped, exact)


def test_mysql_rate_backlog_is_bounded_and_close(mysql_url: str) -> None:
    with mysql_table(mysql_url) as table:
        table.fill(MYSQL_PENDING.format(lo=0, hi=SMALL - 1))

        def capped() -> Any:
            return table.run(mysql_counts.rate_keys_backlog(20, CAP))

        def exact() -> Any:
            return table.run(mysql_rates.rate_keys_backlog(100))

        rate_check(capped, exact)
        bounded(table, capped, exact, MYSQL_PENDING.format(lo=SMALL, hi=BIG - 1))
        rate_check(capped, exact)
