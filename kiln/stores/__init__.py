"""Stores: the Store protocol and the factory that opens one from a database URL."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from kiln._errors import ConfigError
from kiln.stores._protocol import ApplyResult, Capabilities, ReleaseResult, Store, TableSize

SCHEMES = ("sqlite", "postgresql", "postgres", "mysql", "mariadb")


def store_from_url(url: str, **options: Any) -> Store:
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
        return SQLiteStore(path, **options)
    if scheme in ("postgresql", "postgres"):
        from kiln.stores.postgres import PostgresStore

        return PostgresStore(url, **options)
    if scheme in ("mysql", "mariadb"):
        from kiln.stores.mysql import MySQLStore  # type: ignore[import-not-found,unused-ignore]

        store: Store = MySQLStore(url, **options)
        return store
    raise ConfigError(
        "database_url", url, f"unknown scheme {scheme!r}: use one of {', '.join(SCHEMES)}"
    )


__all__ = ["ApplyResult", "Capabilities", "ReleaseResult", "Store", "TableSize", "store_from_url"]
