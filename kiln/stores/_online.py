"""Migrations that never lock a big table: how a migration file's statements run on a
database in use, and what ``kiln migrate --check`` says each pending one will cost.

The migration files stay plain SQL that also runs inside one transaction (``kiln
migrate --sql``, ``kiln.sqlalchemy.upgrade``). On PostgreSQL, where ``kiln_jobs``
already exists, the store runs them online instead (kiln.stores.postgres._online):

- a ``CREATE [UNIQUE] INDEX`` on a table the same file does not create becomes
  ``CREATE INDEX CONCURRENTLY IF NOT EXISTS``, run outside the transaction after the
  file's other statements; an INVALID index of that name (left by an interrupted
  build) is dropped first, so a second run resumes;
- a ``DROP INDEX`` becomes ``DROP INDEX CONCURRENTLY IF EXISTS``; a drop followed by a
  create of the same name (a rebuild) builds the new one under ``<name>_new``, drops
  the old one and renames, so the claim never runs without its index;
- every other statement runs in one transaction, first, and is idempotent (ADD
  COLUMN IF NOT EXISTS, CREATE TABLE IF NOT EXISTS): a run interrupted after it and
  before the version's row applies it again harmlessly.

MySQL/MariaDB files carry their online clauses themselves (``LOCK=NONE``,
``ALGORITHM=INPLACE``, ``ALGORITHM=INSTANT``): DDL there commits at once anyway, and a
clause the server cannot honour fails the statement instead of locking. One thing
MariaDB cannot do online: add a stored column to a table that has an index on a
virtual column (``kiln_jobs_unique`` since version 4); it rebuilds the table while
writes wait. Version 4 therefore adds the columns of 5, 6, 7, 10 and 13 before that
index, instantly, and on a database already past 4 the first of those versions adds
every missing one in a single rebuild (docs/adr/0018-mariadb-online-columns.md).
SQLite has one writer: its migrations hold the write lock while they run (index builds
scale with the table).
"""

from __future__ import annotations

import dataclasses
import re

from kiln.stores import _migrations

_CREATE_INDEX = re.compile(
    r"^CREATE\s+(UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+ON\s+(\w+)(.*)$",
    re.S | re.I,
)
_DROP_INDEX = re.compile(r"^DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?(\w+)\s*$", re.I)
_CREATE_TABLE = re.compile(r"^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_ADD_COLUMN = re.compile(r"\bADD\s+COLUMN\b", re.I)
_ALTER_JOBS = re.compile(r"ALTER\s+TABLE\s+kiln_jobs\b", re.I)
_ADD_KEY = re.compile(r"\bADD\s+(?:UNIQUE\s+)?KEY\s+(\w+)\s*\(\s*(\w+)", re.I)
_COLUMN = re.compile(r"\bADD\s+COLUMN\s+(\w+)", re.I)
_VIRTUAL = re.compile(r"\bVIRTUAL\b", re.I)
_WRITES_JOBS = re.compile(r"^(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+kiln_jobs\b", re.I)
_INDEX_NAME = re.compile(r"INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I)

# rough costs on a small machine (2 cores, default PostgreSQL settings), per million
# rows of kiln_jobs: a B-tree or GIN build reads the table once; a MariaDB rebuild
# copies it. --check prints them as "about"; bench/bench_scale.py measures them.
INDEX_SECONDS_PER_MILLION = 2.0
REBUILD_SECONDS_PER_MILLION = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Online:
    """One statement run outside the transaction, by itself. ``index``: the index it
    builds, which the runner drops first when an interrupted build left it INVALID.
    ``generate``: the statement is a SELECT whose value, when not NULL, is the
    statement to run (an index whose operator class lives in another schema)."""

    sql: str
    index: str | None = None
    generate: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Split:
    """A PostgreSQL migration as the online runner runs it."""

    tx: list[str]
    online: list[Online]


def index_of(statement: str) -> str | None:
    """The name of the index a ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` builds."""
    match = _INDEX_NAME.search(statement)
    return match.group(1) if match else None


def postgres_split(sql: str) -> Split:
    """``sql`` (one PostgreSQL migration file) as its transactional statements and the
    online ones that follow them (the rules in this module's docstring)."""
    statements = _migrations.split_statements(sql)
    new_tables = {m.group(1).lower() for s in statements if (m := _CREATE_TABLE.match(s))}
    created = {
        m.group(2).lower() for s in statements
        if (m := _CREATE_INDEX.match(s)) and m.group(3).lower() not in new_tables
    }
    tx: list[str] = []
    online: list[Online] = []
    rebuilt: set[str] = set()
    for s in statements:
        create = _CREATE_INDEX.match(s)
        drop = _DROP_INDEX.match(s)
        if create and create.group(3).lower() not in new_tables:
            unique, name, table, rest = create.groups()
            target = f"{name}_new" if name.lower() in rebuilt else name
            online.append(Online(
                f"CREATE {(unique or '').upper()}INDEX CONCURRENTLY IF NOT EXISTS {target}"
                f" ON {table}{rest}", index=target))
            if name.lower() in rebuilt:
                online.append(Online(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                online.append(Online(f"ALTER INDEX IF EXISTS {target} RENAME TO {name}"))
                rebuilt.discard(name.lower())
        elif drop and drop.group(1).lower() in created:
            rebuilt.add(drop.group(1).lower())  # dropped once its successor is built
        elif drop:
            online.append(Online(f"DROP INDEX CONCURRENTLY IF EXISTS {drop.group(1)}"))
        else:
            tx.append(s)
    return Split(tx, online)


@dataclasses.dataclass(frozen=True, slots=True)
class Cost:
    """What one pending migration costs a database in use: whether it blocks writes
    to kiln_jobs, and about how long it runs at ``rows``."""

    version: int
    name: str
    locks: bool
    seconds: float
    what: str

    def line(self) -> str:
        verdict = (f"LOCKS kiln_jobs against writes for {_secs(self.seconds)}"
                   if self.locks else f"online, writes go on; runs {_secs(self.seconds)}")
        return f"{self.version:04d} {self.name}: {verdict} ({self.what})"


def _secs(seconds: float) -> str:
    return "under a second" if seconds < 1 else f"about {seconds:.0f} s"


def costs(dialect: str, pending: list[tuple[int, str, str]], rows: int,
          applied: list[str] | None = None) -> list[Cost]:
    """The cost of each pending migration (version, file name, sql) of ``dialect``
    ("postgresql", "mysql", "sqlite") at ``rows`` rows in kiln_jobs (0: a new table,
    where nothing is in use yet). ``applied``: the sql of the versions already applied,
    which say whether kiln_jobs has an index on a virtual column (MariaDB)."""
    millions = rows / 1_000_000
    out: list[Cost] = []
    fresh = rows == 0
    table = _Table()
    for sql in applied or []:
        _mysql(_migrations.split_statements(sql), 0.0, table)
    # which of the columns a file adds "when missing" an applied version really added
    # depends on the kiln that applied it (version 4 adds those of 5 to 13 only since
    # ADR 0018): assume none, so a rebuild is never left out
    table.columns.clear()
    for version, name, sql in pending:
        statements = _migrations.split_statements(sql)
        creates_jobs = any(
            (m := _CREATE_TABLE.match(s)) and m.group(1).lower() == "kiln_jobs"
            for s in statements)
        if creates_jobs:
            fresh = True
        if dialect == "mysql":
            locks, seconds, parts = _mysql(statements, millions, table)
        else:
            measure = _postgres if dialect == "postgresql" else _sqlite
            locks, seconds, parts = measure(sql, statements, millions)
        if fresh:
            out.append(Cost(version, name, False, 0.0, "new tables"))
            continue
        out.append(Cost(version, name, locks, seconds,
                        "; ".join(parts) or "no change to kiln_jobs"))
    return out


@dataclasses.dataclass(slots=True)
class _Table:
    """What the MariaDB migrations seen so far gave kiln_jobs."""

    columns: set[str] = dataclasses.field(default_factory=set)
    virtual: set[str] = dataclasses.field(default_factory=set)
    virtual_keys: list[str] = dataclasses.field(default_factory=list)


def _postgres(sql: str, statements: list[str], millions: float) -> tuple[bool, float, list[str]]:
    split = postgres_split(sql)
    builds = sum(1 for o in split.online if o.index)
    builds += sum(1 for s in split.tx if "CREATE INDEX" in s.upper())  # in a DO block
    drops = sum(1 for o in split.online if o.sql.startswith("DROP"))
    columns = sum(len(_ADD_COLUMN.findall(s)) for s in split.tx if _ALTER_JOBS.search(s))
    writes = sum(1 for s in split.tx if _WRITES_JOBS.match(s))
    parts = [text for count, text in (
        (builds, f"{builds} index build(s) CONCURRENTLY"),
        (drops, f"{drops} index drop(s) CONCURRENTLY"),
        (columns, f"{columns} column(s) added without a rewrite, a brief lock"),
        (writes, f"{writes} UPDATE(s) of the rows concerned"),
    ) if count]
    return False, builds * INDEX_SECONDS_PER_MILLION * millions, parts


def _mysql(statements: list[str], millions: float,
           table: _Table) -> tuple[bool, float, list[str]]:
    """One MariaDB file: a column a file finds already there (its ALTER adds only the
    missing ones) costs nothing; a stored column added once kiln_jobs has an index on a
    virtual column is a rebuild during which writes wait (one per statement)."""
    locks, seconds, parts = False, 0.0, []
    for s in statements:
        if not _ALTER_JOBS.search(s):
            continue
        found = list(_COLUMN.finditer(s))
        added = [(m.group(1).lower(), bool(_VIRTUAL.search(
            s, m.end(), found[i + 1].start() if i + 1 < len(found) else len(s))))
            for i, m in enumerate(found)]
        new = [(c, virtual) for c, virtual in added if c not in table.columns]
        stored = [c for c, virtual in new if not virtual]
        keys = [(m.group(1), m.group(2).lower()) for m in _ADD_KEY.finditer(s)]
        if stored and table.virtual_keys:
            locks = True
            seconds += REBUILD_SECONDS_PER_MILLION * millions
            parts.append(
                f"{len(stored)} column(s) in one table rebuild while writes wait: MariaDB"
                " adds no column instantly or online to a table with an index on a virtual"
                f" column ({', '.join(table.virtual_keys)})")
        elif new:
            parts.append(f"{len(new)} column(s) added instantly")
        if keys and "LOCK=NONE" in s.upper():
            seconds += len(keys) * INDEX_SECONDS_PER_MILLION * millions
            parts.append(f"{len(keys)} index build(s) ALGORITHM=INPLACE, LOCK=NONE")
        table.columns.update(c for c, _ in added)
        table.virtual.update(c for c, virtual in added if virtual)
        table.virtual_keys.extend(name for name, first in keys if first in table.virtual
                                  and name not in table.virtual_keys)
    return locks, seconds, parts


def _sqlite(sql: str, statements: list[str], millions: float) -> tuple[bool, float, list[str]]:
    builds = sum(1 for s in statements if _CREATE_INDEX.match(s))
    columns = sum(len(_ADD_COLUMN.findall(s)) for s in statements)
    parts = [text for count, text in (
        (builds, f"{builds} index build(s) under SQLite's write lock"),
        (columns, f"{columns} column(s) added, no rewrite"),
    ) if count]
    # SQLite has one writer: every migration holds the write lock while it runs
    return bool(builds or columns), builds * INDEX_SECONDS_PER_MILLION * millions, parts
