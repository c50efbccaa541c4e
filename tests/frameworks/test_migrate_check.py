"""``kiln migrate --check``: for each pending migration, whether it locks kiln_jobs
against writes and about how long it runs at the table's size, on every database."""

from __future__ import annotations

import asyncio

import pytest

from kiln.cli import run
from kiln.stores import _migrations, _online, store_from_url
from tests.stores.factories import insert, job

LATEST = _migrations.latest("kiln.stores.sqlite")


def check(capsys: pytest.CaptureFixture[str], url: str) -> str:
    assert run(["migrate", "--check", "--database-url", url]) == 0
    out: str = capsys.readouterr().out
    return out


async def migrate_to(url: str, upto: int, jobs: int) -> None:
    every = _migrations.load
    _migrations.load = lambda package: every(package)[:upto]
    store = store_from_url(url)
    await store.open()
    try:
        await store.migrate()
    finally:
        _migrations.load = every
    try:
        for _ in range(jobs // 100):
            await insert(store, *[job() for _ in range(100)])
    finally:
        await store.close()


def test_check_on_an_empty_database_and_a_current_one(
    empty_store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = check(capsys, empty_store_url)
    assert f"schema 0, {LATEST} pending" in out and "none locks kiln_jobs" in out
    assert "0001 0001_init.sql: online" in out and "(new tables" in out
    assert run(["migrate", "--database-url", empty_store_url]) == 0
    capsys.readouterr()
    assert "nothing pending" in check(capsys, empty_store_url)
    assert run(["migrate", "--status", "--database-url", empty_store_url]) == 0
    assert f"schema {LATEST}, 0 pending" in capsys.readouterr().out  # --check wrote nothing


def test_check_names_what_each_pending_migration_does(
    empty_store_url: str, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(migrate_to(empty_store_url, 14, 300))
    out = check(capsys, empty_store_url)
    assert f"schema 14, {LATEST - 14} pending" in out
    [line] = [x for x in out.splitlines() if x.startswith("0015 ")]
    if backend == "postgresql":
        assert "online, writes go on" in line and "3 index build(s) CONCURRENTLY" in line
    elif backend == "mysql":
        assert "online, writes go on" in line and "LOCK=NONE" in line
    else:
        assert "LOCKS kiln_jobs against writes" in line and "SQLite's write lock" in line


def test_the_estimate_scales_with_the_table() -> None:
    every = _migrations.load("kiln.stores.mysql")
    pending = [(v, f"{v:04d}", sql) for v, sql in every if v in (5, 15)]
    applied = [sql for v, sql in every if v < 5]
    small, big = (_online.costs("mysql", pending, rows, applied) for rows in (1_000, 3_000_000))
    # past version 4 (kiln_jobs_unique, an index on a virtual column) MariaDB rebuilds
    # the table for 5's columns
    assert [c.locks for c in big] == [True, False]
    assert big[0].seconds == pytest.approx(3 * _online.REBUILD_SECONDS_PER_MILLION)
    assert big[1].seconds == pytest.approx(2 * 3 * _online.INDEX_SECONDS_PER_MILLION)
    assert "about 30 s" in big[0].line() and "under a second" in small[0].line()
    pg = [(v, f"{v:04d}", sql) for v, sql in _migrations.load("kiln.stores.postgres")
          if v > 1]
    assert not any(c.locks for c in _online.costs("postgresql", pg, 10_000_000))


def test_mariadb_columns_are_instant_through_version_4() -> None:
    """Version 4 adds the columns of 5 to 13 before its index on a virtual column: a
    database upgrading through it adds every column instantly (ADR 0018); one already
    past it gets them in one rebuild, not one per version."""
    every = _migrations.load("kiln.stores.mysql")
    through = _online.costs("mysql", [(v, f"{v:04d}", sql) for v, sql in every if v > 3],
                            10_000_000, [sql for v, sql in every if v <= 3])
    assert not any(c.locks for c in through)
    assert "5 column(s) added instantly" in through[0].what
    past = _online.costs("mysql", [(v, f"{v:04d}", sql) for v, sql in every if v > 4],
                         10_000_000, [sql for v, sql in every if v <= 4])
    assert [c.version for c in past if c.locks] == [5]
    assert "kiln_jobs_unique" in past[0].what
