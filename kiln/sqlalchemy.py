"""kiln's migrations inside a SQLAlchemy application's own Alembic history.

``conn=`` itself needs nothing from here: ``app.enqueue(..., conn=session)`` takes a
SQLAlchemy ``Session``, ``AsyncSession``, ``Connection`` or ``AsyncConnection`` as it is
(see ``kiln._joined``). This module is for the schema: ``upgrade(op)`` in an Alembic
revision applies kiln's pending migrations on Alembic's connection, in its transaction,
and records them in ``kiln_migrations`` exactly as ``kiln migrate`` does, so either can
run afterwards and finds the schema current.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from kiln.stores import _script


def upgrade(bind: Any) -> list[int]:
    """Apply kiln's pending migrations on ``bind``: a SQLAlchemy ``Connection`` or
    Alembic's ``op``. Returns the versions applied (none when already current)."""
    conn = _connection(bind)
    dialect = _script.dialect(conn.dialect.name)
    have = schema_version(conn)
    if have == 0:
        conn.exec_driver_sql(dialect.create_table)
    # the driver is handed parameters (none), so a format-style driver reads % as one
    percent = "%%" if conn.dialect.paramstyle in ("format", "pyformat") else "%"
    applied: list[int] = []
    for version, statements in _script.statements(dialect, have):
        for statement in statements:
            conn.exec_driver_sql(statement.replace("%", percent))
        applied.append(version)
    return applied


def schema_version(bind: Any) -> int:
    """The highest kiln migration applied on ``bind``'s database; 0 for none."""
    conn = _connection(bind)
    if not sa.inspect(conn).has_table("kiln_migrations"):
        return 0
    return int(conn.exec_driver_sql(_script.VERSION).scalar_one())


def _connection(bind: Any) -> sa.Connection:
    get_context = getattr(bind, "get_context", None)  # Alembic's op
    if get_context is not None:
        if get_context().as_sql:
            raise TypeError(
                "kiln.sqlalchemy.upgrade needs a database (Alembic's offline --sql mode has "
                "none): print kiln's SQL with `kiln migrate --sql --dialect NAME --from N`"
            )
        bind = bind.get_bind()
    if not isinstance(bind, sa.Connection):
        raise TypeError(
            f"kiln.sqlalchemy.upgrade takes a SQLAlchemy Connection or Alembic's op, "
            f"not {type(bind).__name__}"
        )
    return bind


__all__ = ["schema_version", "upgrade"]
