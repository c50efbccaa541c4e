"""Database fixtures: ``store_url`` and ``store`` parametrised over every backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from kiln.stores import Store, store_from_url

POSTGRES_URL = os.environ.get(
    "KILN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("KILN_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"
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


@pytest.fixture
def mysql_url() -> Iterator[str]:
    """An empty MySQL/MariaDB database of its own, for the MySQL-only tests."""
    yield from mysql_database_url()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty, isolated database of each backend."""
    backend = request.param
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'kiln.db'}"
    elif backend == "postgres":
        yield from postgres_schema_url()
    else:
        yield from mysql_database_url()


@pytest.fixture
def backend(store_url: str) -> str:
    return urlsplit(store_url).scheme


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
