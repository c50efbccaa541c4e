"""SQLite's schema: applying migrations and reading the applied version.

The migration rules are kiln.stores._migrations'; the whole migration runs in one
BEGIN IMMEDIATE transaction, whose write lock keeps two processes migrating at once
apart. The clock of an embedded database is its host's (the store's ``now``).
"""

from __future__ import annotations

import sqlite3

from kiln.stores import _migrations
from kiln.stores.sqlite._plan import batches, write

PACKAGE = "kiln.stores.sqlite"


def latest() -> int:
    return _migrations.latest(PACKAGE)


def migrate(conn: sqlite3.Connection) -> list[int]:
    return write(conn, batches, _migrations.run(_migrations.SQLITE))


def version(conn: sqlite3.Connection) -> int:
    return batches(conn, _migrations.applied(_migrations.SQLITE))
