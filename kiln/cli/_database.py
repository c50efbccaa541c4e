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
from kiln._errors import KilnError
from kiln.stores import Store, store_from_url


class DefaultDatabaseError(KilnError):
    """No database was named and kiln's default one is not there."""


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
    try:
        await store.open()
    except KilnError as exc:
        raise _named(url, exc) from exc
    try:
        if migrated:
            try:
                await store.schema_check()
            except KilnError as exc:
                raise _named(url, exc) from exc
        yield store
    finally:
        await store.close()


def _named(url: str, error: KilnError) -> KilnError:
    """``error``, said of the default database when no URL was given: a forgotten URL
    must not read as "run kiln migrate", which would create a stray kiln.db here."""
    if url != DEFAULT_URL or os.environ.get("KILN_DATABASE_URL"):
        return error
    path = os.path.abspath(url.removeprefix("sqlite:///"))
    return DefaultDatabaseError(
        f"no database given (--database-url or KILN_DATABASE_URL), so kiln used its default"
        f" {DEFAULT_URL} ({path}), which is not a kiln database: {error}. Give your"
        f" database's URL; `kiln migrate` without one creates that file")
