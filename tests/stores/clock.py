"""The conformance suite's clock: tests of leases, heartbeats and ages move the
database clock forward instead of sleeping.

The database clock still decides (design.md, decision 3): ``Clock.advance`` adds an
offset to it, each store's way, in tests only.

- PostgreSQL: the test's schema gets a ``now()`` of its own, which adds the offset
  kept in a one-row table to ``pg_catalog.now()``; the store's search_path names the
  schema before pg_catalog, so every statement's ``now()`` is that one
  (``clockable_url`` prepares both before the store migrates).
- MySQL: the store sets each session's clock ahead of the server's before a plan
  (``MySQLStore.clock_shift``: ``SET timestamp``, which UTC_TIMESTAMP follows).
- SQLite: the database clock is its host's, ``time.time()``; the store's modules read
  it through a clock shifted by the offset.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from kiln.stores import Store

TABLE = "kiln_test_clock"


def clockable_url(url: str) -> str:
    """``url`` ready for a Clock: on PostgreSQL, its schema's own now() first."""
    if urlsplit(url).scheme != "postgresql":
        return url
    import psycopg

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if "options" not in query:  # kiln's schema= setting (KILN_TEST_POSTGRES_VIA)
        pytest.skip("the test clock's now() needs the schema first on the search_path;"
                    " kiln's schema= setting qualifies tables and leaves now() alone")
    schema = query["options"].split("=", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.{TABLE} (ahead float8 NOT NULL)")
        conn.execute(f"INSERT INTO {schema}.{TABLE} VALUES (0)")
        conn.execute(
            f"CREATE FUNCTION {schema}.now() RETURNS timestamptz LANGUAGE sql STABLE AS"
            f" $$ SELECT pg_catalog.now() + (SELECT ahead FROM {schema}.{TABLE})"
            " * interval '1 second' $$"
        )
    query["options"] = f"-csearch_path={schema},pg_catalog"
    return urlunsplit(parts._replace(query=urlencode(query)))


def clockable(url: str) -> Iterator[str]:
    """``clockable_url(url)`` for one test (a module's ``store_url`` fixture); after it,
    PostgreSQL's clock table and now() are removed, in one transaction, so that the pool
    (tests/plugins/pool.py) empties and reuses the schema instead of dropping it and
    migrating a new one for the next test (its fingerprint sees the extra table)."""
    ready = clockable_url(url)
    yield ready
    if ready == url:
        return
    import psycopg

    schema = dict(parse_qsl(urlsplit(url).query))["options"].split("=", 1)[1]
    # at worst the pool drops the schema, as before
    with contextlib.suppress(psycopg.Error), psycopg.connect(url, connect_timeout=5) as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(f"DROP FUNCTION {schema}.now()")
        conn.execute(f"DROP TABLE {schema}.{TABLE}")


class _ShiftedTime:
    """The ``time`` module with ``time()`` ahead by ``ahead`` seconds."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class Clock:
    """Moves the database clock of a test's stores forward (see the module)."""

    def __init__(self, url: str, stores: list[Store], monkeypatch: pytest.MonkeyPatch) -> None:
        self.url = url
        self.stores = stores
        self.backend = urlsplit(url).scheme
        self._shifted = _ShiftedTime()
        if self.backend == "sqlite":
            for name, module in list(sys.modules.items()):
                if name.startswith("kiln.stores.sqlite.") and getattr(module, "time", None) is time:
                    monkeypatch.setattr(module, "time", self._shifted)

    def add(self, store: Store) -> None:
        """Another store on the same database (MySQL shifts each store's sessions)."""
        self.stores.append(store)

    async def advance(self, seconds: float) -> None:
        if self.backend == "postgresql":
            import psycopg

            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as c:
                await c.execute(f"UPDATE {TABLE} SET ahead = ahead + %s", (seconds,))
        elif self.backend == "mysql":
            for store in self.stores:
                store.clock_shift(seconds)  # type: ignore[attr-defined]
        else:
            self._shifted.ahead += seconds


@pytest.fixture
def clock(store: Store, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The test's database clock; its module overrides ``store_url`` with
    ``clockable_url`` so that PostgreSQL's now() can be moved."""
    yield Clock(store_url, [store], monkeypatch)
