"""MySQL/MariaDB plans for the schema: applying migrations, reading the applied
version, and the database clock.

The migration rules are kiln.stores._migrations'. MySQL commits DDL at once, so
migrations cannot be transactional: a named lock (GET_LOCK) keeps two ``kiln
migrate`` runs apart, and every migration file is written to be safe to run again
after a crash (IF NOT EXISTS everywhere). The store releases the lock (``unlock``)
whatever happened.
"""

from __future__ import annotations

from datetime import datetime

from kiln.stores import _migrations
from kiln.stores.mysql._plan import Plan, batches, one

PACKAGE = "kiln.stores.mysql"


def latest() -> int:
    return _migrations.latest(PACKAGE)


def migrate() -> Plan[list[int]]:
    """Apply the missing migrations under the migration lock; see ``unlock``."""
    return (yield from batches(_migrations.run(_migrations.MYSQL)))


def unlock() -> Plan[None]:
    yield one(_migrations.MYSQL.unlock)


def version() -> Plan[int]:
    return (yield from batches(_migrations.applied(_migrations.MYSQL)))


def now() -> Plan[datetime]:
    out = yield one("SELECT UTC_TIMESTAMP(6)")
    value: datetime = out[0].rows[0][0]
    return value
