"""kiln's migrations inside a SQLAlchemy application's own Alembic history.

``conn=`` itself needs nothing from here: ``app.enqueue(..., conn=session)`` takes a
SQLAlchemy ``Session``, ``AsyncSession``, ``Connection`` or ``AsyncConnection`` as it is
(see ``kiln._client._joined``). This module is for the schema: ``upgrade(op)`` in an Alembic
revision applies kiln's pending migrations on Alembic's connection, in its transaction,
and records them in ``kiln_migrations`` exactly as ``kiln migrate`` does, so either can
run afterwards and finds the schema current.
"""

from __future__ import annotations

from typing import Any, TypeVar

import sqlalchemy as sa

from kiln.stores import _migrations, _script

T = TypeVar("T")


def upgrade(bind: Any) -> list[int]:
    """Apply kiln's pending migrations on ``bind``: a SQLAlchemy ``Connection`` or
    Alembic's ``op``. Returns the versions applied (none when already current)."""
    conn = _connection(bind)
    # kiln migrate's runner, without its lock: the caller's tool runs one at a time
    return _batches(conn, _migrations.run(_script.dialect(conn.dialect.name), lock=False))


def schema_version(bind: Any) -> int:
    """The highest kiln migration applied on ``bind``'s database; 0 for none."""
    conn = _connection(bind)
    return _batches(conn, _migrations.applied(_script.dialect(conn.dialect.name)))


def _batches(conn: sa.Connection, runner: _migrations.Runner[T]) -> T:
    """Run a statement-batch runner of kiln.stores._migrations on ``conn``."""
    # the driver is handed parameters (none), so a format-style driver reads % as one
    percent = "%%" if conn.dialect.paramstyle in ("format", "pyformat") else "%"
    return _migrations.execute(
        runner, lambda batch: [_first(conn, sql.replace("%", percent)) for sql in batch]
    )


def _first(conn: sa.Connection, sql: str) -> Any:
    result = conn.exec_driver_sql(sql)
    return result.scalar() if result.returns_rows else None


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
