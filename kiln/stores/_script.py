"""kiln's migrations as plain SQL, for a dialect: for ``kiln migrate --sql`` and for
running them inside another tool's migration history (``kiln.sqlalchemy.upgrade``).

A script is the statements of every migration above a version, each followed by the
row that records it in ``kiln_migrations``, preceded by that table's creation: what
``kiln migrate`` runs, minus its lock. The stores stay the only place with SQL.
"""

from __future__ import annotations

import importlib.resources

from kiln._errors import ConfigError
from kiln.stores import _migrations, _online
from kiln.stores._migrations import Dialect

DIALECTS = {d.name: d for d in (_migrations.POSTGRES, _migrations.MYSQL, _migrations.SQLITE)}
ALIASES = {"postgres": "postgresql", "mariadb": "mysql", "sqlite3": "sqlite"}

VERSION = _migrations.VERSION


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


def costs(d: Dialect, above: int, rows: int) -> list[_online.Cost]:
    """What each migration of ``d`` above ``above`` costs a kiln_jobs of ``rows`` rows
    (``kiln migrate --check``; kiln.stores._online)."""
    names = dict(migrations(d))
    every = _migrations.load(d.package)
    pending = [(v, names[v], sql) for v, sql in every if v > above]
    return _online.costs(d.name, pending, rows, [sql for v, sql in every if v <= above])
