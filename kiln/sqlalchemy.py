"""``kiln.sqlalchemy``, the documented path of :mod:`kiln.contrib.sqlalchemy`, which it
re-exports: kiln's migrations inside a SQLAlchemy application's own Alembic history."""

from kiln.contrib.sqlalchemy import schema_version, upgrade

__all__ = ["schema_version", "upgrade"]
