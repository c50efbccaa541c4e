"""A pool of migrated databases per test process, behind the ``store_url`` fixture.

Migrating a new database for each of the ~1,500 tests that want one costs a schema and
its migrations every time (PostgreSQL ~50 ms idle, MariaDB ~110 ms, both several times
that on a loaded machine, plus the drop). Here each xdist worker keeps the PostgreSQL
schemas and MySQL databases it migrated and hands a free one to the next test, emptied:

- before a test: every kiln table but ``kiln_migrations`` and the tables the migrations
  fill (``kiln_installation``) is emptied and its ids start again at 1: PostgreSQL
  deletes the rows and restarts every sequence of the schema in one transaction (a
  tenth of the cost of TRUNCATE, which makes new files); MySQL truncates the tables that
  hold rows or whose AUTO_INCREMENT moved. The list comes from the catalog, not from a
  list kept here, so a new migration's table is emptied too;
- after a test: the schema's fingerprint (columns, indexes, constraints, triggers, the
  migrations applied, the rows the migrations wrote) is compared with the one it had
  when it was migrated; a test that changed any of it (dropped a table, rolled a
  migration back) has its database dropped, not reused;
- SQLite: a copy of a file migrated once per process.

A database that cannot be emptied (a lock held past 5 s by something the test left
running) is dropped and replaced. Every pooled database is dropped when the process
exits. Tests that need an empty database take ``empty_store_url`` instead; a test marked
``fresh_database`` gets a migrated database never used before (the plan checks: a table
that held rows keeps its statistics and pages, and the planner with them).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tests.support.stores import migrate

MIGRATIONS = "kiln_migrations"
LOCK_TIMEOUT = 5  # seconds a reset waits for a lock before replacing the database


@dataclasses.dataclass
class Pooled:
    backend: str  # "postgres" or "mysql"
    name: str  # the schema or database
    url: str
    tables: list[str] = dataclasses.field(default_factory=list)  # emptied before each test
    seeded: list[str] = dataclasses.field(default_factory=list)  # rows from the migrations
    fingerprint: str = ""


_free: dict[str, list[Pooled]] = {}
_made: list[Pooled] = []
_template: Path | None = None


def migrated_url(backend: str, tmp_path: Path, *, fresh: bool = False) -> Iterator[str]:
    """The URL of a migrated database of ``backend`` for one test (see the module doc);
    with ``fresh``, one made for this test and dropped after it."""
    if backend == "sqlite":
        path = tmp_path / "kiln.db"
        shutil.copyfile(_sqlite_template(), path)
        yield f"sqlite:///{path}"
        return
    pooled = _make(backend) if fresh else _take(backend)
    try:
        yield pooled.url
    finally:
        if fresh:
            _drop(pooled)
        else:
            _give_back(pooled)


def _take(backend: str) -> Pooled:
    free = _free.setdefault(backend, [])
    while free:
        pooled = free.pop()
        try:
            _reset(pooled)
            return pooled
        except Exception:  # a lock the last test left behind: a new one instead
            _drop(pooled)
    return _make(backend)


def _give_back(pooled: Pooled) -> None:
    try:
        same = _fingerprint(pooled) == pooled.fingerprint
    except Exception:
        same = False
    if same:
        _free[pooled.backend].append(pooled)
    else:
        _drop(pooled)


def _migrate(url: str) -> None:
    # on a thread of its own: the fixture may be set up while an event loop runs
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate(url)).result()


def _sqlite_template() -> Path:
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="kiln-tests-template-"))
        atexit.register(shutil.rmtree, folder, True)
        _migrate(f"sqlite:///{folder / 'template.db'}")
        _template = folder / "template.db"
    return _template


def _make(backend: str) -> Pooled:
    from tests.plugins import databases  # the servers' URLs, and how to skip without one

    name = f"kiln_t_pool_{uuid.uuid4().hex[:12]}"
    if backend == "postgres":
        import psycopg

        base = databases.POSTGRES_URL
        try:
            with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"CREATE SCHEMA {name}")
        except psycopg.OperationalError as exc:
            databases.unavailable("postgres", str(exc))
        parts = urlsplit(base)
        query = dict(parse_qsl(parts.query))
        query["options"] = f"-csearch_path={name}"
        url = urlunsplit(parts._replace(query=urlencode(query)))
    else:
        import pymysql

        try:
            conn = databases.mysql_connect(databases.MYSQL_URL, database=False,
                                           connect_timeout=5)
        except pymysql.err.OperationalError as exc:
            databases.unavailable("mysql", str(exc))
            raise
        with conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        url = urlunsplit(urlsplit(databases.MYSQL_URL)._replace(path=f"/{name}"))
    pooled = Pooled(backend, name, url)
    _made.append(pooled)
    _migrate(url)
    with _connect(pooled) as conn:
        tables = _tables(pooled, conn)
        pooled.seeded = [t for t in tables if _has_rows(conn, t)]
        pooled.tables = [t for t in tables if t not in pooled.seeded]
    pooled.fingerprint = _fingerprint(pooled)
    return pooled


@contextlib.contextmanager
def _connect(pooled: Pooled) -> Iterator[Any]:
    if pooled.backend == "postgres":
        import psycopg

        with psycopg.connect(pooled.url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}s'")
            yield conn
    else:
        from tests.plugins.databases import mysql_connect

        conn = mysql_connect(pooled.url, connect_timeout=5)
        with conn:
            yield _MySQL(conn)


class _MySQL:
    """pymysql's connection with psycopg's ``execute(sql, params).fetchall()``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        cur = self.conn.cursor()
        cur.execute(sql, params or None)
        return cur


def _tables(pooled: Pooled, conn: Any) -> list[str]:
    if pooled.backend == "postgres":
        sql = ("SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> %s"
               " ORDER BY tablename")
    else:
        sql = ("SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
               " AND table_name <> %s AND table_type = 'BASE TABLE' ORDER BY table_name")
    return [str(r[0]) for r in conn.execute(sql, (pooled.name, MIGRATIONS)).fetchall()]


def _has_rows(conn: Any, table: str) -> bool:
    return bool(conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchall())


def _with_rows(conn: Any, tables: list[str]) -> set[str]:
    """Those of ``tables`` that hold a row, in one query (one round trip)."""
    if not tables:
        return set()
    sql = " UNION ALL ".join(f"SELECT '{t}' FROM (SELECT 1 FROM {t} LIMIT 1) AS r{i}"
                             for i, t in enumerate(tables))
    return {str(r[0]) for r in conn.execute(sql).fetchall()}


def _reset(pooled: Pooled) -> None:
    # every name below comes from the catalog of a database made here
    with _connect(pooled) as conn:
        if pooled.backend == "postgres":
            import psycopg

            sequences = [r[0] for r in conn.execute(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = %s",
                (pooled.name,)).fetchall()]
            try:  # in one pipeline: one round trip, not one per statement
                with conn.pipeline(), conn.transaction():
                    for table in pooled.tables:
                        conn.execute(f"DELETE FROM {table}")
                    for sequence in sequences:
                        conn.execute("SELECT setval(%s, 1, false)", (sequence,))
            except psycopg.errors.ForeignKeyViolation:  # an order DELETE cannot take
                conn.execute(f"TRUNCATE {', '.join(pooled.tables)} RESTART IDENTITY CASCADE")
            return
        conn.execute(f"SET SESSION lock_wait_timeout = {LOCK_TIMEOUT}")
        moved = {str(r[0]) for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " AND auto_increment > 1", (pooled.name,)).fetchall()}
        filled = _with_rows(conn, [t for t in pooled.tables if t not in moved])
        dirty = [t for t in pooled.tables if t in moved or t in filled]
        if dirty:
            conn.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in dirty:
                conn.execute(f"TRUNCATE TABLE {table}")
            conn.execute("SET FOREIGN_KEY_CHECKS = 1")


def _fingerprint(pooled: Pooled) -> str:
    """A digest of the schema's shape, its migrations and the rows the migrations wrote."""
    if pooled.backend == "postgres":
        shape = [
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull"
            " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND a.attnum > 0 AND NOT a.attisdropped",
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s",
            "SELECT conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = %s",
            "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s",
        ]
    else:
        shape = [
            "SELECT table_name, column_name, column_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = %s",
            "SELECT table_name, index_name, column_name, seq_in_index, non_unique"
            " FROM information_schema.statistics WHERE table_schema = %s",
            "SELECT trigger_name, event_object_table FROM information_schema.triggers"
            " WHERE trigger_schema = %s",
        ]
    digest = hashlib.sha256()
    with _connect(pooled) as conn:
        # PostgreSQL: every query in one pipeline (one round trip); the results are read
        # once it is synced, in the order sent
        with conn.pipeline() if pooled.backend == "postgres" else contextlib.nullcontext():
            shapes = [conn.execute(sql, (pooled.name,)) for sql in shape]
            rows = [conn.execute(f"SELECT * FROM {t}") for t in [MIGRATIONS, *pooled.seeded]]
        for cursor in shapes:
            digest.update(repr(sorted(map(tuple, cursor.fetchall()))).encode())
        for cursor in rows:
            digest.update(repr(sorted(map(repr, cursor.fetchall()))).encode())
    return digest.hexdigest()


def _drop(pooled: Pooled) -> None:
    with contextlib.suppress(Exception):  # at worst the schema outlives the run
        if pooled.backend == "postgres":
            import psycopg

            from tests.plugins.databases import POSTGRES_URL

            with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}s'")
                conn.execute(f"DROP SCHEMA IF EXISTS {pooled.name} CASCADE")
        else:
            from tests.plugins.databases import MYSQL_URL, mysql_connect

            conn = mysql_connect(MYSQL_URL, database=False, connect_timeout=5)
            with conn, conn.cursor() as cur:
                cur.execute(f"SET SESSION lock_wait_timeout = {LOCK_TIMEOUT}")
                cur.execute(f"DROP DATABASE IF EXISTS {pooled.name}")
    if pooled in _made:
        _made.remove(pooled)
    with contextlib.suppress(ValueError):
        _free.get(pooled.backend, []).remove(pooled)


@atexit.register
def _drop_all() -> None:
    for pooled in list(_made):
        _drop(pooled)
