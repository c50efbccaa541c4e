"""Numbered migration files and the one runner that applies them, for every dialect.

Versions are the same across dialects: 0001 means the same schema everywhere. A
dialect gives only its SQL pieces (a ``Dialect``: how it creates and fills
``kiln_migrations``, how it asks whether that table exists, how it takes the
migration lock); the runner decides the order. It is a generator of statement
batches, so each store executes it its own way (psycopg, asyncmy, sqlite3 or a
SQLAlchemy connection) and the rules stay in one place:

1. a database already at this kiln's latest version (or past it) is done: nothing to
   apply, so no lock to wait for (servers that start while a long migration holds it
   elsewhere, or a session that died holding it, do not wait);
2. otherwise take the dialect's migration lock, if it has one beyond its transaction's;
3. read the applied version (0 when ``kiln_migrations`` does not exist yet, and
   create it then);
4. for each version above it: its statements and the row that records it, together.

The executor sends the statements of a batch together and answers with each
statement's first value (None for one that returns no row).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from kiln._errors import NotMigratedError, StoreError

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
T = TypeVar("T")
S = TypeVar("S")  # a dialect's step
A = TypeVar("A")  # what a dialect's step answers

# statements sent together -> each one's first value; the runner's result at the end
Runner = Generator[list[str], list[Any], T]

# the applied version, once kiln_migrations is known to exist (the same in every dialect)
VERSION = "SELECT COALESCE(MAX(version), 0) FROM kiln_migrations"


@dataclasses.dataclass(frozen=True, slots=True)
class Dialect:
    """One dialect's pieces of the migration runner (and of ``kiln migrate --sql``)."""

    name: str
    package: str
    create_table: str  # kiln_migrations, IF NOT EXISTS
    record: str  # INSERT of one applied version; {version} is filled in
    transactional: bool  # DDL rolls back with the transaction
    exists: str  # one value, true when kiln_migrations exists
    lock: str = ""  # takes the migration lock, answering 1; "" when the transaction's is enough
    unlock: str = ""  # releases it, when the transaction's end does not


def load(package: str) -> list[tuple[int, str]]:
    """Return (version, sql) pairs of ``package``.migrations, in order."""
    folder = importlib.resources.files(package) / "migrations"
    found: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    return found


def latest(package: str) -> int:
    versions = load(package)
    return versions[-1][0] if versions else 0


def require(have: int, want: int, where: str) -> None:
    """``schema_check``'s rule: a database below the version this kiln needs refuses
    to run (NotMigratedError naming both versions and the fix)."""
    if have < want:
        raise NotMigratedError(
            "schema_check",
            f"database {where} is at schema {have}, kiln needs {want}: run `kiln migrate`",
        )


def applied(d: Dialect) -> Runner[int]:
    """The highest version applied; 0 before the first migration."""
    exists = yield [d.exists]
    if not exists[0]:
        return 0
    have = yield [VERSION]
    return int(have[0])


def run(d: Dialect, *, lock: bool = True) -> Runner[list[int]]:
    """Apply the pending migrations of ``d``; return the versions applied. ``lock``
    False: the caller's transaction or tool keeps concurrent runs apart."""
    if lock and d.lock:
        if (yield from applied(d)) >= latest(d.package):
            return []  # up to date: no lock to take (module doc)
        taken = yield [d.lock]
        if taken[0] != 1:
            raise StoreError("migrate", "another migration held the migration lock too long")
    have = yield from applied(d)
    if have == 0:  # only then: IF NOT EXISTS on an existing table warns on MySQL
        yield [d.create_table]
    done: list[int] = []
    for version, sql in load(d.package):
        if version > have:
            yield [*split_statements(sql), d.record.format(version=int(version))]
            done.append(version)
    return done


def plan_of(
    runner: Runner[T], step: Callable[[list[str]], S], firsts: Callable[[A], list[Any]]
) -> Generator[S, A, T]:
    """``runner`` as a dialect's plan: ``step`` makes a batch the plan's step, and
    ``firsts`` takes each statement's first value from what the step answered."""
    try:
        batch = next(runner)
        while True:
            batch = runner.send(firsts((yield step(batch))))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def execute(runner: Runner[T], firsts: Callable[[list[str]], list[Any]]) -> T:
    """Run ``runner`` on a synchronous connection: ``firsts`` executes a batch and
    answers with each statement's first value."""
    try:
        batch = next(runner)
        while True:
            batch = runner.send(firsts(batch))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def split_statements(sql: str) -> list[str]:
    """Split a migration on semicolons, except inside ``$$ ... $$`` bodies."""
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    statements: list[str] = []
    current: list[str] = []
    for part in "\n".join(lines).split(";"):
        current.append(part)
        if "".join(current).count("$$") % 2 == 0:  # not inside a dollar-quoted body
            statement = ";".join(current).strip()
            if statement:
                statements.append(statement)
            current = []
    if current and ";".join(current).strip():
        statements.append(";".join(current).strip())
    return statements


POSTGRES = Dialect(
    "postgresql", "kiln.stores.postgres",
    "CREATE TABLE IF NOT EXISTS kiln_migrations (version INTEGER PRIMARY KEY,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    "INSERT INTO kiln_migrations (version) VALUES ({version})",
    transactional=True,
    exists="SELECT to_regclass('kiln_migrations') IS NOT NULL",
    # a transaction-scoped advisory lock: two processes migrating at once apply each
    # version once; it ends with the migration's transaction
    lock="SELECT 1 FROM pg_advisory_xact_lock(7250311614113729)",
)
MYSQL = Dialect(
    "mysql", "kiln.stores.mysql",
    "CREATE TABLE IF NOT EXISTS kiln_migrations (version INT NOT NULL PRIMARY KEY,"
    " applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
    "INSERT INTO kiln_migrations (version, applied_at) VALUES ({version},"
    " UTC_TIMESTAMP(6))",
    transactional=False,
    exists="SELECT COUNT(*) FROM information_schema.tables"
    " WHERE table_schema = DATABASE() AND table_name = 'kiln_migrations'",
    # DDL commits at once: a named lock (60 s wait) keeps two runs apart, and every
    # migration file is safe to run again after a crash (IF NOT EXISTS everywhere)
    lock="SELECT GET_LOCK(CONCAT('kiln_migrate.', DATABASE()), 60)",
    unlock="DO RELEASE_LOCK(CONCAT('kiln_migrate.', DATABASE()))",
)
SQLITE = Dialect(
    "sqlite", "kiln.stores.sqlite",
    "CREATE TABLE IF NOT EXISTS kiln_migrations "
    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
    "INSERT INTO kiln_migrations (version, applied_at) VALUES ({version},"
    " (julianday('now') - 2440587.5) * 86400.0)",
    transactional=True,
    # BEGIN IMMEDIATE, which the store runs the migration in, is the lock
    exists="SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'"
    " AND name = 'kiln_migrations'",
)
