"""Migrations on a table in use (docs/operating.md, "Upgrading"): PostgreSQL and MariaDB.

A database is migrated to an old version and filled (ROWS jobs), then workers claim,
complete and enqueue jobs with statements an old kiln could run, while ``migrate()``
applies the rest: no claim, completion or insert waits longer than BOUND. On
PostgreSQL the same migrations run as one transaction (the ``kiln migrate --sql``
script, what ``migrate()`` did before it built indexes CONCURRENTLY) hold the claims
for most of the time they run, which shows the measure can fail. Either way the schema is the
one a fresh database gets. An interrupted PostgreSQL run (an INVALID index, a version
whose columns went in but whose indexes did not) resumes.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from kiln.stores import _migrations, _script
from tests.plugins.databases import mysql_connect, mysql_database_url, postgres_schema_url
from tests.support.stores import migrate as migrate_store
from tests.support.waits import wait_for_sync

ROWS = 100_000  # finished jobs: every index build reads them all
READY = 5_000  # available jobs, ahead of them by id
BOUND = 1.0  # seconds: the longest any claim, completion or insert may wait
# MariaDB from 3: version 4 adds the columns of 5 to 13 instantly before its index on a
# virtual column, after which MariaDB could add them only by rebuilding the table (ADR
# 0018; a database past 4 without them gets one rebuild, test_one_rebuild_past_version_4)
FROM = {"postgresql": 1, "mysql": 3}


@pytest.fixture
def url(empty_store_url: str, backend: str) -> Iterator[str]:
    if backend == "sqlite":
        pytest.skip("SQLite has one writer: its migrations hold the write lock")
    yield empty_store_url


def migrate(url: str, upto: int | None = None) -> list[int]:
    every = _migrations.load
    if upto is None:
        return asyncio.run(migrate_store(url))
    _migrations.load = lambda package: every(package)[:upto]
    try:
        return asyncio.run(migrate_store(url))
    finally:
        _migrations.load = every


def fill(url: str, backend: str) -> None:
    if backend == "postgresql":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                " SELECT 'q', 'k', CASE WHEN g <= %s THEN 'available' ELSE 'completed' END,"
                " '{}', now(), 3 FROM generate_series(1, %s) g", (READY, READY + ROWS))
            conn.execute("ANALYZE kiln_jobs")
        return
    my = mysql_connect(url)
    with my, my.cursor() as cur:
        cur.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, errors,"
            " run_at, created_at, max_attempts) SELECT 'q', 'k', IF(seq <= %s, 'available',"
            " 'completed'), '{}', '{}', '{}', '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 3"
            f" FROM seq_1_to_{READY + ROWS}", (READY,))
        cur.execute("ANALYZE TABLE kiln_jobs")
        cur.fetchall()


class Workers:
    """Threads claiming, completing and enqueueing as an older worker would, each
    timing its every statement; ``worst`` is the longest any of them waited."""

    def __init__(self, url: str, backend: str) -> None:
        self.url, self.backend = url, backend
        self.stop = threading.Event()
        self.worst = 0.0
        self.done = 0
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(work,), daemon=True)
                        for work in (self._claim, self._claim, self._enqueue)]

    def __enter__(self) -> Workers:
        for t in self.threads:
            t.start()
        wait_for_sync(lambda: self.done >= 20, 10, "the workers to get going")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        assert not self.errors, self.errors

    def timed(self, work: Callable[[], Any]) -> Any:
        start = time.monotonic()
        out = work()
        took = time.monotonic() - start
        with self.lock:
            self.worst = max(self.worst, took)
            self.done += 1
        return out

    def _run(self, work: Callable[[Any], None]) -> None:
        try:
            if self.backend == "postgresql":
                conn: Any = psycopg.connect(self.url, autocommit=True)
            else:
                conn = mysql_connect(self.url)
            with conn:
                while not self.stop.is_set():
                    work(conn)
        except BaseException as exc:  # reported by __exit__
            self.errors.append(exc)

    def _sql(self, conn: Any, sql: str, *args: Any) -> Any:
        if self.backend == "postgresql":
            return conn.execute(sql, args or None).fetchall() if "SELECT" in sql else (
                conn.execute(sql, args or None))
        cur = conn.cursor()
        cur.execute(sql.replace("now()", "UTC_TIMESTAMP(6)"), args or None)
        return cur.fetchall()

    def _claim(self, conn: Any) -> None:
        def claim() -> int | None:
            self._sql(conn, "BEGIN")
            rows = self._sql(
                conn, "SELECT id FROM kiln_jobs WHERE state = 'available' AND queue = 'q'"
                " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
            if rows:
                self._sql(conn, "UPDATE kiln_jobs SET state = 'running', attempt = 1"
                          " WHERE id = %s", rows[0][0])
            self._sql(conn, "COMMIT")
            return rows[0][0] if rows else None

        job = self.timed(claim)
        if job is not None:
            self.timed(lambda: self._sql(
                conn, "UPDATE kiln_jobs SET state = 'completed', finished_at = now()"
                " WHERE id = %s", job))

    def _enqueue(self, conn: Any) -> None:
        if self.backend == "postgresql":
            sql = ("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                   " VALUES ('q', 'k', 'available', '{}', now(), 3)")
        else:
            sql = ("INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, errors,"
                   " run_at, created_at, max_attempts) VALUES ('q', 'k', 'available', '{}',"
                   " '{}', '{}', '[]', now(), now(), 3)")
        self.timed(lambda: self._sql(conn, sql))
        time.sleep(0.005)  # a steady trickle, not a flood: the pace of the test's load


def shape(url: str, backend: str) -> list[tuple[Any, ...]]:
    """The jobs table's indexes and columns, as the catalog describes them."""
    if backend == "postgresql":
        with psycopg.connect(url, autocommit=True) as conn:
            indexes = conn.execute(
                "SELECT indexname, regexp_replace(indexdef, ' ON \\S+\\.', ' ON ')"
                " FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1").fetchall()
            valid = conn.execute(
                "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND NOT i.indisvalid").fetchall()
            columns = conn.execute(
                "SELECT table_name, column_name, data_type, column_default, is_nullable"
                " FROM information_schema.columns WHERE table_schema = current_schema()"
                " ORDER BY 1, ordinal_position").fetchall()
        return [*indexes, *valid, *columns]
    my = mysql_connect(url)
    with my, my.cursor() as cur:
        out = []
        for table in ("kiln_jobs", "kiln_rate_limits", "kiln_concurrency_declarations"):
            cur.execute(f"SHOW CREATE TABLE {table}")
            name, ddl = cur.fetchall()[0]
            out.append((name, re.sub(r" AUTO_INCREMENT=\d+", "", ddl)))
        return out


def fresh_shape(backend: str) -> list[tuple[Any, ...]]:
    make = postgres_schema_url if backend == "postgresql" else mysql_database_url
    urls = make()
    url = next(urls)
    try:
        migrate(url)
        return shape(url, backend)
    finally:
        next(urls, None)


def test_migrations_leave_claims_and_inserts_running(url: str, backend: str) -> None:
    assert migrate(url, FROM[backend]) == list(range(1, FROM[backend] + 1))
    fill(url, backend)
    with Workers(url, backend) as workers:
        before = workers.done
        start = time.monotonic()
        applied = migrate(url)
        took = time.monotonic() - start
        during = workers.done - before
    assert applied == list(range(FROM[backend] + 1, _migrations.latest("kiln.stores.sqlite") + 1))
    print(f"migrated {applied} in {took:.1f} s; longest wait {workers.worst:.3f} s")
    assert during >= 20, f"only {during} statements ran in the {took:.1f} s of migrating"
    # never BOUND, nor half the run (which the one-transaction form below exceeds)
    assert workers.worst < min(BOUND, took / 2), (
        f"a worker waited {workers.worst:.2f} s while migrations {applied} ran ({took:.1f} s)")
    assert shape(url, backend) == fresh_shape(backend)


def test_one_transaction_holds_the_claims(url: str, backend: str) -> None:
    """The measure can fail: the same migrations as the script runs them (one
    transaction, plain CREATE INDEX) keep the workers waiting while the indexes build."""
    if backend != "postgresql":
        pytest.skip("MySQL commits each statement: there is no one-transaction form")
    migrate(url, FROM[backend])
    fill(url, backend)
    script = _script.render(_script.dialect(backend), FROM[backend])
    with Workers(url, backend) as workers, psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        conn.execute(script.encode())
        took = time.monotonic() - start
    # the workers waited for (most of) the whole run, where online they never wait BOUND
    assert workers.worst > took / 2, (
        f"the longest wait was {workers.worst:.2f} s of the script's {took:.2f} s")


def test_an_interrupted_run_resumes(url: str, backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("MySQL's statements are each their own, and checked before they run")
    migrate(url, 6)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                     " SELECT 'q', 'k', 'available', '{}', now(), 3"
                     " FROM generate_series(1, 3)")
        # version 7 interrupted: its column went in, one index build failed half way
        # (a unique build over duplicates leaves an INVALID index, as a cancel would)
        conn.execute("ALTER TABLE kiln_jobs ADD COLUMN tags TEXT[] NOT NULL DEFAULT '{}'")
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY kiln_jobs_tags ON kiln_jobs (queue)")
        assert conn.execute("SELECT indisvalid FROM pg_index"
                            " WHERE indexrelid = to_regclass('kiln_jobs_tags')"
                            ).fetchall() == [(False,)]
    assert migrate(url) == list(range(7, _migrations.latest("kiln.stores.sqlite") + 1))
    assert shape(url, backend) == fresh_shape(backend)


HOISTED = ("attempt_running", "result", "tags", "conc_key", "defaulted")  # 5, 6, 7, 10, 13


def test_one_rebuild_past_version_4(url: str, backend: str) -> None:
    """A MariaDB database an older kiln took to version 4 (without the columns of 5 to
    13, which version 4 adds since ADR 0018) gets them in one rebuild, the first pending
    version's: `kiln migrate --check` says that one locks and no other, and the schema
    ends as a fresh one."""
    if backend != "mysql":
        pytest.skip("MariaDB's indexed virtual columns")
    migrate(url, 4)
    my = mysql_connect(url)
    with my, my.cursor() as cur:
        cur.execute("ALTER TABLE kiln_jobs " + ", ".join(f"DROP COLUMN {c}" for c in HOISTED))
    fill(url, backend)
    costs = _script.costs(_script.dialect("mysql"), 4, READY + ROWS)
    assert [c.version for c in costs if c.locks] == [5]
    assert "5 column(s) in one table rebuild" in costs[0].what
    with Workers(url, backend) as workers:
        start = time.monotonic()
        applied = migrate(url)
        took = time.monotonic() - start
    print(f"migrated {applied} in {took:.1f} s; longest wait {workers.worst:.3f} s")
    assert applied == list(range(5, _migrations.latest("kiln.stores.sqlite") + 1))
    assert shape(url, backend) == fresh_shape(backend)


def test_version_4_resumed_after_an_older_kilns_was_cut_short(url: str, backend: str) -> None:
    """An older kiln's version 4 cut short after its index on a virtual column: this
    version 4, run again, adds the columns of 5 to 13 without the INSTANT clause (which
    MariaDB refuses then) and the schema ends as a fresh one."""
    if backend != "mysql":
        pytest.skip("MariaDB's indexed virtual columns")
    migrate(url, 4)
    my = mysql_connect(url)
    with my, my.cursor() as cur:
        cur.execute("ALTER TABLE kiln_jobs " + ", ".join(f"DROP COLUMN {c}" for c in HOISTED))
        cur.execute("DELETE FROM kiln_migrations WHERE version = 4")
        with pytest.raises(Exception, match="ALGORITHM=INSTANT is not supported"):
            cur.execute("ALTER TABLE kiln_jobs ADD COLUMN result JSON NULL, ALGORITHM=INSTANT")
    assert migrate(url) == list(range(4, _migrations.latest("kiln.stores.sqlite") + 1))
    assert shape(url, backend) == fresh_shape(backend)
