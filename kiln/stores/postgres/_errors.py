"""How psycopg's errors become kiln's (see kiln.stores._translator): a missing table
is NotMigratedError, a lost or refused connection or an exhausted pool is
UnreachableError, anything else StoreError (``contended`` for a lock or statement
timeout, a deadlock or a serialization failure). Messages name the database by host, port
and name, never with its password.
"""

from __future__ import annotations

import psycopg
import psycopg.errors
import psycopg_pool

from kiln._errors import NotMigratedError, StoreError, UnreachableError


def is_driver_error(exc: BaseException) -> bool:
    """A psycopg error (an exhausted pool's PoolTimeout is one too)."""
    return isinstance(exc, psycopg.Error)


def where(url: str) -> str:
    """host:port/dbname of ``url``, for messages (never the password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the configured PostgreSQL server"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def translate(operation: str, url: str, exc: BaseException) -> StoreError:
    """A kiln error for a psycopg or pool error, to be raised ``from`` it."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return NotMigratedError(
            operation, f"the kiln schema is missing at {where(url)}: run `kiln migrate` ({exc})"
        )
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return UnreachableError(
            operation, f"no connection to PostgreSQL at {where(url)} came free in time:"
            f" the server is unreachable or every pooled connection is busy ({exc})"
        )
    if _prepared_lost(exc):
        return StoreError(
            operation, f"a prepared statement was lost at {where(url)} ({str(exc).strip()}):"
            " is kiln behind a transaction-mode pooler (PgBouncer, pgcat, Supavisor, RDS"
            " Proxy)? Set pooler=transaction in the URL or the store options"
        )
    if _unreachable(exc):
        return UnreachableError(
            operation, f"cannot reach PostgreSQL at {where(url)}: {str(exc).strip()}"
        )
    return StoreError(operation, str(exc).strip() or type(exc).__name__,
                      contended=getattr(exc, "sqlstate", None) in CONTENDED)


# statement_timeout (or a cancel), lock_timeout, serialization failure, deadlock
CONTENDED = frozenset({"57014", "55P03", "40001", "40P01"})
_SERVER_GONE = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now


# a prepared statement missing, already there, or bound to another's parameters: the
# symptoms of a transaction-mode pooler handing a session's statements to other clients
_PREPARED_LOST = ("26000", "42P05")


def _prepared_lost(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    return state in _PREPARED_LOST or (
        state == "08P01" and "prepared statement" in str(exc)
    )


def _unreachable(exc: BaseException) -> bool:
    if isinstance(exc, psycopg.errors.PipelineAborted):
        return False
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SERVER_GONE
