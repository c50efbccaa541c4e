"""The driver connection behind a framework's handle, for enqueue's ``conn=``.

``conn=`` joins the caller's transaction on the driver's own connection (psycopg,
sqlite3, PyMySQL, asyncmy). Web code mostly holds a framework's handle instead: a
SQLAlchemy ``Session``, ``AsyncSession``, ``Connection`` or ``AsyncConnection``, or a
Django connection. This module finds the driver connection behind such a handle, after
making sure the framework has begun the transaction it will commit or roll back, so
the job exists if and only if that transaction commits.

The frameworks are never imported here: a handle is recognised only when its framework
is already loaded (``sys.modules``), so none of this costs anything when unused. A
driver connection, or anything else, is handed to the store unchanged (the stores
refuse a type they cannot join, with a TypeError naming it).
"""

from __future__ import annotations

import sys
from typing import Any


def joined_sync(conn: Any) -> Any:
    """The driver connection behind ``conn`` (a sync handle), in its transaction."""
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.engine import Connection
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
        from sqlalchemy.orm import Session

        if isinstance(conn, AsyncSession | AsyncConnection):
            raise TypeError(
                f"a SQLAlchemy {type(conn).__name__} needs the async enqueue (aenqueue)"
            )
        if isinstance(conn, Session):
            conn = conn.connection()  # begins the session's transaction if it had none
        if isinstance(conn, Connection):
            if not conn.in_transaction():
                conn.begin()  # else conn.commit() would have nothing to commit
            return conn.connection.driver_connection
    if "django.db" in sys.modules:
        from django.db.backends.base.base import BaseDatabaseWrapper

        if isinstance(conn, BaseDatabaseWrapper):
            conn.ensure_connection()
            return conn.connection  # in transaction.atomic() Django has autocommit off
    return conn


async def joined(conn: Any) -> Any:
    """The driver connection behind ``conn`` (a sync or async handle)."""
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncSession):
            conn = await conn.connection()
        if isinstance(conn, AsyncConnection):
            if not conn.in_transaction():
                await conn.begin()
            raw = await conn.get_raw_connection()
            return _async_driver(raw.driver_connection)
    return joined_sync(conn)


def _async_driver(driver: Any) -> Any:
    if type(driver).__module__.startswith("aiosqlite"):
        raise TypeError(
            "an aiosqlite connection cannot be joined (its sqlite3 connection lives on "
            "aiosqlite's own thread): use a sync Session on sqlite3 with app.enqueue"
        )
    return driver
