"""Which database a command talks to, and opening its store.

The stores translate driver errors (UnreachableError, NotMigratedError); SQLite
never creates a file outside ``migrate``, so a mistyped path writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator

from kiln._app import DEFAULT_URL
from kiln.stores import Store, store_from_url


def url_of(args: argparse.Namespace) -> str:
    """--database-url, else $KILN_DATABASE_URL, else sqlite:///kiln.db."""
    return explicit_url(args) or os.environ.get("KILN_DATABASE_URL") or DEFAULT_URL


def explicit_url(args: argparse.Namespace) -> str | None:
    """The URL given with --database-url on this command line, if any."""
    value: str | None = getattr(args, "database_url", None)
    return value


@contextlib.asynccontextmanager
async def opened(url: str, *, migrated: bool = True) -> AsyncIterator[Store]:
    """An open store for ``url``; with ``migrated``, one whose schema is current."""
    store = store_from_url(url)  # raises ConfigError for an unknown scheme
    await store.open()
    try:
        if migrated:
            await store.schema_check()
        yield store
    finally:
        await store.close()
