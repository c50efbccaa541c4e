"""Stores: the Store protocol and the factory that opens one from a database URL."""

from __future__ import annotations

from typing import Any, TypedDict, Unpack, cast
from urllib.parse import urlsplit

from kiln._errors import ConfigError
from kiln.stores._protocol import ApplyResult, Capabilities, ReleaseResult, Store, TableSize

SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")


class StoreOptions(TypedDict, total=False):
    """The connection options of ``kiln.App(url, ...)`` and ``store_from_url``; each
    database takes its own (another's is refused with a ConfigError naming it)."""

    max_conns: int  # PostgreSQL, MariaDB: the pool's connections (8)
    min_conns: int  # PostgreSQL: connections kept open (1)
    connect_timeout: float  # PostgreSQL: seconds to connect (10)
    # PostgreSQL: "transaction" behind a transaction-mode pooler (no prepared
    # statements; LISTEN only on listen_url), "session" (or unset) otherwise
    pooler: str
    listen_url: str  # PostgreSQL: a direct or session-mode URL for LISTEN
    schema: str  # PostgreSQL: the schema of kiln's tables and its notify channel
    # PostgreSQL: per queue at most one NOTIFY per window from a process (0.01 s; 0:
    # a NOTIFY with every insert)
    notify_window: float
    # PostgreSQL: False sends no NOTIFY and opens no LISTEN (App sets it when given a Bus)
    notify: bool
    pool: Any  # MariaDB: an existing connection pool to use
    busy_timeout: float  # SQLite: seconds to wait for the write lock (30)


_TAKES = {
    "sqlite": ("busy_timeout",),
    "postgresql": ("max_conns", "min_conns", "connect_timeout", "pooler", "listen_url",
                   "schema", "notify_window", "notify"),
    "mysql": ("max_conns", "pool"),
}


def _checked(dialect: str, options: StoreOptions) -> dict[str, Any]:
    takes = _TAKES[dialect]
    for name in options:
        if name not in takes:
            raise ConfigError("store option", name,
                              f"a {dialect} database takes only {', '.join(takes)}")
    return cast(dict[str, Any], options)


def with_bus(url: str, options: StoreOptions) -> StoreOptions:
    """The options of a store whose wake-ups a Bus carries: on PostgreSQL no NOTIFY and
    no LISTEN (``notify=False``), unless the options say otherwise."""
    scheme = urlsplit(url).scheme.split("+")[0].lower()
    if scheme not in ("postgresql", "postgres") or "notify" in options:
        return options
    return {**options, "notify": False}


def store_from_url(url: str, **options: Unpack[StoreOptions]) -> Store:
    """Build (not open) the store for ``url``.

    ``sqlite:///relative.db``, ``sqlite:////abs/path.db``, ``postgresql://...``,
    ``mysql://...`` (also ``mariadb://``).
    """
    scheme = urlsplit(url).scheme.split("+")[0].lower()
    if scheme == "sqlite":
        from kiln.stores.sqlite import SQLiteStore

        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ConfigError("database_url", url, "a SQLite URL looks like sqlite:///path.db")
        return SQLiteStore(path, **_checked("sqlite", options))
    if scheme in ("postgresql", "postgres"):
        from kiln.stores.postgres import PostgresStore

        return PostgresStore(url, **_checked("postgresql", options))
    if scheme in ("mysql", "mariadb"):
        from kiln.stores.mysql import MySQLStore  # type: ignore[import-not-found,unused-ignore]

        store: Store = MySQLStore(url, **_checked("mysql", options))
        return store
    raise ConfigError(
        "database_url", url, f"unknown scheme {scheme!r}: use one of {', '.join(SCHEMES)}"
    )


__all__ = [
    "ApplyResult", "Capabilities", "ReleaseResult", "Store", "StoreOptions", "TableSize",
    "store_from_url", "with_bus",
]
