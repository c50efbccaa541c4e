"""PostgreSQL plans for the schema: applying migrations, reading the applied version,
and the database clock.

The migration rules are kiln.stores._migrations'; the whole migration runs in one
transaction (PostgreSQL's DDL is transactional) under a transaction-scoped advisory
lock, so two processes migrating at once apply each version once.
"""

from __future__ import annotations

from datetime import datetime

from kiln.stores import _migrations
from kiln.stores.postgres._plan import Plan, Stmt, batches, one, step

PACKAGE = "kiln.stores.postgres"


def latest() -> int:
    return _migrations.latest(PACKAGE)


def migrate() -> Plan[list[int]]:
    """Apply the missing versions (the store runs it in one transaction)."""
    return (yield from batches(_migrations.run(_migrations.POSTGRES)))


def migrate_in(schema: str) -> Plan[list[int]]:
    """``migrate`` in ``schema`` (a checked name: kiln.stores.postgres._settings), made
    if missing; its search_path holds for the migration's transaction only, so the
    names a migration leaves unqualified (its indexes) land there too."""
    yield step(Stmt(f"CREATE SCHEMA IF NOT EXISTS {schema}"),
               Stmt(f"SET LOCAL search_path TO {schema}"))
    return (yield from migrate())


def version() -> Plan[int]:
    return (yield from batches(_migrations.applied(_migrations.POSTGRES)))


def now() -> Plan[datetime]:
    rows = (yield one("SELECT now()"))[0]
    value: datetime = rows[0][0]
    return value
