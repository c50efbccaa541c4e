"""MySQL/MariaDB schema: applying numbered migrations, reading the version, the clock.

MySQL commits DDL at once, so migrations cannot be transactional: a named lock
(GET_LOCK) keeps two ``kiln migrate`` runs apart, and every migration file is written
to be safe to run again after a crash (IF NOT EXISTS everywhere).
"""

from __future__ import annotations

from datetime import datetime

from kiln._errors import StoreError
from kiln.stores import _migrations
from kiln.stores.mysql._plan import Plan, Step, Stmt, one

PACKAGE = "kiln.stores.mysql"
LOCK = "CONCAT('kiln_migrate.', DATABASE())"
LOCK_WAIT = 60  # seconds to wait for another migration to finish


def latest() -> int:
    return _migrations.latest(PACKAGE)


def version() -> Plan[int]:
    out = yield one(
        "SELECT COUNT(*) FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_name = 'kiln_migrations'"
    )
    if not int(out[0].rows[0][0]):
        return 0
    out = yield one("SELECT COALESCE(MAX(version), 0) FROM kiln_migrations")
    return int(out[0].rows[0][0])


def migrate() -> Plan[list[int]]:
    """Apply the missing migrations under the migration lock; see ``unlock``."""
    out = yield one(f"SELECT GET_LOCK({LOCK}, {LOCK_WAIT})")
    if out[0].rows[0][0] != 1:
        raise StoreError("migrate", f"another migration held the lock for {LOCK_WAIT}s")
    have = yield from version()
    if have == 0:  # only then: IF NOT EXISTS on an existing table logs a server warning
        yield one(
            "CREATE TABLE IF NOT EXISTS kiln_migrations (version INT NOT NULL PRIMARY KEY,"
            " applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB"
        )
    applied: list[int] = []
    for number, sql in _migrations.load(PACKAGE):
        if number <= have:
            continue
        yield Step(tuple(Stmt(s) for s in _migrations.split_statements(sql)))
        yield one(
            "INSERT INTO kiln_migrations (version, applied_at) VALUES (%s, UTC_TIMESTAMP(6))",
            number,
        )
        applied.append(number)
    return applied


def unlock() -> Plan[None]:
    yield one(f"DO RELEASE_LOCK({LOCK})")


def now() -> Plan[datetime]:
    out = yield one("SELECT UTC_TIMESTAMP(6)")
    value: datetime = out[0].rows[0][0]
    return value
