"""Database fixtures: ``store_url`` and ``store`` parametrised over every backend."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from kiln.stores import Store, store_from_url
from tests.plugins import pool

POSTGRES_URL = os.environ.get(
    "KILN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("KILN_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"
# "schema": PostgreSQL tests use kiln's schema= setting; "pgbouncer": that, through a
# PgBouncer in transaction mode (tests/plugins/pgbouncer.py); unset: options=-csearch_path
VIA = os.environ.get("KILN_TEST_POSTGRES_VIA", "")
BACKENDS = ["sqlite", "postgres"] + (["mysql"] if os.environ.get("KILN_MYSQL", "1") == "1" else [])


def unavailable(backend: str, reason: str) -> None:
    """Skip a test whose database is missing; fail it instead with CI=true."""
    message = f"{backend} is not reachable: {reason}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: the {backend} suite must run)")
    pytest.skip(message)


def postgres_schema_url(base: str | None = None) -> Iterator[str]:
    """A fresh schema in ``base`` (default: the test server), dropped after."""
    base = base or POSTGRES_URL
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - dev extra installs it
        unavailable("postgres", str(exc))
        raise
    schema = f"kiln_t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:
        unavailable("postgres", str(exc))
    parts = urlsplit(base)
    query = dict(parse_qsl(parts.query))
    if VIA == "pgbouncer":  # kiln's schema= setting, through a transaction-mode PgBouncer
        from tests.plugins.pgbouncer import shared

        query.update(schema=schema, pooler="transaction")
        parts = urlsplit(shared().url())
    elif VIA == "schema":  # kiln's schema= setting, on a direct connection
        query["schema"] = schema
    else:
        query["options"] = f"-csearch_path={schema}"
    yield urlunsplit(parts._replace(query=urlencode(query)))
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def mysql_connect(url: str, *, autocommit: bool = True, database: bool = True,
                  **options: Any) -> Any:
    """A pymysql connection to the server (and, with ``database``, the database) that a
    ``mysql://`` URL names; ``options`` go to ``pymysql.connect``."""
    import pymysql  # the sync driver, for tests that reach under the store

    parts = urlsplit(url)
    if database:
        options["database"] = parts.path.lstrip("/")
    # without it, PyMySQL builds a TLS context for every connection to try TLS first
    # (loading the system's CA bundle: ~30 ms of CPU each, several times that on a loaded
    # machine), even against a server without TLS; the pool (tests/plugins/pool.py)
    # connects twice per MySQL test. The test servers are on loopback.
    options.setdefault("ssl_disabled", True)
    return pymysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                           user=parts.username or "root", password=parts.password or "",
                           autocommit=autocommit, **options)


def mysql_database_url(base: str | None = None) -> Iterator[str]:
    """A fresh database on ``base``'s server (default: the test server), dropped after."""
    import pymysql  # the sync driver, only for creating and dropping test databases

    server = base or MYSQL_URL
    parts = urlsplit(server)
    name = f"kiln_t_{uuid.uuid4().hex[:12]}"

    def execute(sql: str) -> None:
        # a connection per statement: the server may restart in between (tests/chaos)
        conn = mysql_connect(server, autocommit=False, database=False, connect_timeout=5)
        with conn, conn.cursor() as cur:
            cur.execute(sql)

    try:
        execute(f"CREATE DATABASE {name}")
    except pymysql.err.OperationalError as exc:
        unavailable("mysql", str(exc))
        raise
    yield urlunsplit(parts._replace(path=f"/{name}"))
    execute(f"DROP DATABASE {name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """With KILN_TEST_POSTGRES_VIA (kiln's schema= setting, perhaps through PgBouncer),
    a test that opens its own libpq connection with the store's URL (to reach under
    the store) does not apply: libpq refuses kiln's parameters. It is reported as
    skipped, saying so, rather than failed; every other failure stays a failure."""
    outcome = yield
    report = outcome.get_result()
    if not VIA or not report.failed:
        return
    text = "\n".join([str(report.longrepr), *(c for _, c in report.sections)])
    if _own_connection_refused(text):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           "Skipped: opens its own libpq connection with the store's URL"
                           f", which carries kiln's parameters (KILN_TEST_POSTGRES_VIA={VIA})")


_REFUSED = re.compile(r'invalid URI query parameter: "(schema|pooler|listen_url)"')
_FRAME = re.compile(r'File "([^"]+)", line \d+|^(\S+\.py):\d+: ', re.M)


def _own_connection_refused(text: str) -> bool:
    """Whether libpq refused kiln's URL parameters in a connection a test file opened
    (the last frame before psycopg's is under tests/); one kiln opened is a failure."""
    found = False
    for match in _REFUSED.finditer(text):
        frames = [m.group(1) or m.group(2) for m in _FRAME.finditer(text, 0, match.start())]
        callers = [f for f in frames if "site-packages/psycopg" not in f
                   and "asyncio" not in f and "contextlib" not in f]
        if not callers or ("/tests/" not in callers[-1]
                           and not callers[-1].startswith("tests/")):
            return False
        found = True
    return found


@pytest.fixture
def mysql_url() -> Iterator[str]:
    """An empty MySQL/MariaDB database of its own, for the MySQL-only tests."""
    yield from mysql_database_url()


@pytest.fixture(params=BACKENDS)
def database_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the test's database: ``sqlite``, ``postgres`` or ``mysql``; the
    parameter that ``store_url`` and ``empty_store_url`` share."""
    backend: str = request.param
    return backend


@pytest.fixture
def empty_store_url(database_backend: str, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty, isolated database of each backend, for the tests of migrating
    one (the others take ``store_url``'s migrated one)."""
    if database_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'kiln.db'}"
    elif database_backend == "postgres":
        yield from postgres_schema_url()
    else:
        yield from mysql_database_url()


@pytest.fixture
def store_url(request: pytest.FixtureRequest, database_backend: str,
              tmp_path: Path) -> Iterator[str]:
    """A URL to a migrated database of each backend, all of its own for the test: a copy of
    a migrated SQLite file, or a PostgreSQL schema / MySQL database of this process's pool,
    emptied before the test (tests/plugins/pool.py); a new one, never used before, for a
    test marked ``fresh_database`` (plan checks: a reused table keeps its statistics)."""
    fresh = request.node.get_closest_marker("fresh_database") is not None
    yield from pool.migrated_url(database_backend, tmp_path, fresh=fresh)


@pytest.fixture
def backend(database_backend: str) -> str:
    """The scheme of the test's database URL: ``sqlite``, ``postgresql`` or ``mysql``."""
    return {"postgres": "postgresql"}.get(database_backend, database_backend)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open, migrated store on each backend."""
    s = store_from_url(store_url)
    await s.open()
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()
