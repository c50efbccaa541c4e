"""kiln's migrations as plain SQL, for a dialect: for ``kiln migrate --sql`` and for
running them inside another tool's migration history (``kiln.sqlalchemy.upgrade``).

A script is the statements of every migration above a version, each followed by the
row that records it in ``kiln_migrations``, preceded by that table's creation: what
``kiln migrate`` runs, minus its lock. The stores stay the only place with SQL.
"""

from __future__ import annotations

import dataclasses
import importlib.resources

from kiln._errors import ConfigError
from kiln.stores import _migrations


@dataclasses.dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    package: str
    create_table: str  # kiln_migrations, IF NOT EXISTS
    record: str  # INSERT of one applied version; {version} is filled in
    transactional: bool  # DDL rolls back with the transaction


DIALECTS = {
    "postgresql": Dialect(
        "postgresql", "kiln.stores.postgres",
        "CREATE TABLE IF NOT EXISTS kiln_migrations (version INTEGER PRIMARY KEY,"
        " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        "INSERT INTO kiln_migrations (version) VALUES ({version})",
        transactional=True,
    ),
    "mysql": Dialect(
        "mysql", "kiln.stores.mysql",
        "CREATE TABLE IF NOT EXISTS kiln_migrations (version INT NOT NULL PRIMARY KEY,"
        " applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
        "INSERT INTO kiln_migrations (version, applied_at) VALUES ({version},"
        " UTC_TIMESTAMP(6))",
        transactional=False,
    ),
    "sqlite": Dialect(
        "sqlite", "kiln.stores.sqlite",
        "CREATE TABLE IF NOT EXISTS kiln_migrations "
        "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
        "INSERT INTO kiln_migrations (version, applied_at) VALUES ({version},"
        " (julianday('now') - 2440587.5) * 86400.0)",
        transactional=True,
    ),
}
ALIASES = {"postgres": "postgresql", "mariadb": "mysql", "sqlite3": "sqlite"}

# the applied version, once kiln_migrations is known to exist (the same in every dialect)
VERSION = "SELECT COALESCE(MAX(version), 0) FROM kiln_migrations"


def dialect(name: str) -> Dialect:
    """The dialect of a URL scheme or SQLAlchemy dialect name (``postgresql+psycopg``)."""
    key = name.split("+")[0].lower()
    key = ALIASES.get(key, key)
    if key not in DIALECTS:
        raise ConfigError(
            "dialect", name, f"kiln has migrations for {', '.join(DIALECTS)} only"
        )
    return DIALECTS[key]


def migrations(d: Dialect) -> list[tuple[int, str]]:
    """(version, file name) of every migration of ``d``, in order."""
    folder = importlib.resources.files(d.package) / "migrations"
    found = [
        (int(m.group(1)), entry.name)
        for entry in folder.iterdir()
        if (m := _migrations._NAME.match(entry.name))
    ]
    return sorted(found)


def statements(d: Dialect, above: int = 0) -> list[tuple[int, list[str]]]:
    """Per pending version (above ``above``): its statements, the recording INSERT last."""
    out: list[tuple[int, list[str]]] = []
    for version, sql in _migrations.load(d.package):
        if version > above:
            stmts = _migrations.split_statements(sql)
            out.append((version, [*stmts, d.record.format(version=int(version))]))
    return out


def render(d: Dialect, above: int = 0) -> str:
    """The pending migrations of ``d`` as one SQL script (empty when none are pending)."""
    pending = statements(d, above)
    if not pending:
        return ""
    names = dict(migrations(d))
    lines = [f"-- kiln migrations {pending[0][0]}..{pending[-1][0]} ({d.name})"]
    if d.transactional:
        lines.append("BEGIN;")
    lines.append(d.create_table + ";")
    for version, stmts in pending:
        lines.append(f"\n-- {names[version]}")
        lines.extend(s + ";" for s in stmts)
    if d.transactional:
        lines.append("COMMIT;")
    return "\n".join(lines) + "\n"
