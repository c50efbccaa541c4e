"""How MySQL driver errors become kiln's (see kiln.stores._translator): a missing table
is NotMigratedError, a lost or refused connection UnreachableError, anything else
StoreError with the server's error code. The drivers (asyncmy, aiomysql, and a
caller's PyMySQL or mysqlclient) share MySQL's numeric codes, read from ``args[0]``.
"""

from __future__ import annotations

from kiln._errors import NotMigratedError, StoreError, UnreachableError

NO_SUCH_TABLE = 1146
DEADLOCK = 1213
DUPLICATE_KEY = 1062
LOCK_WAIT_TIMEOUT = 1205
# lock wait timeout, deadlock, MySQL's max_execution_time, MariaDB's max_statement_time
CONTENDED = frozenset({LOCK_WAIT_TIMEOUT, DEADLOCK, 3024, 1969})
# can't connect, unknown host, gone away, lost, access denied, unknown database,
# too many connections, server shutting down, connection killed
_UNREACHABLE = {2002, 2003, 2005, 2006, 2013, 2055, 1045, 1049, 1040, 1053, 1927, 4031}


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


_DRIVERS = ("asyncmy", "aiomysql", "pymysql", "MySQLdb", "mysql")


def is_driver_error(exc: BaseException) -> bool:
    """A MySQL driver error or a socket-level failure: what the store translates."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    return type(exc).__module__.split(".")[0] in _DRIVERS


def is_disconnect(exc: BaseException) -> bool:
    code = error_code(exc)
    return isinstance(exc, OSError | TimeoutError) or (code is not None and code >= 2000) or (
        code in _UNREACHABLE
    )


def translate(operation: str, where: str, exc: BaseException) -> StoreError:
    """A kiln error for a driver error, to be raised ``from`` it."""
    code = error_code(exc)
    text = str(exc.args[1]) if len(getattr(exc, "args", ())) > 1 else str(exc)
    text = text.strip() or type(exc).__name__
    if code == NO_SUCH_TABLE:
        return NotMigratedError(
            operation, f"the kiln schema is missing at {where}: run `kiln migrate` ({text})"
        )
    if isinstance(exc, OSError | TimeoutError) or code in _UNREACHABLE or (
        code is not None and 2000 <= code < 3000
    ):
        return UnreachableError(operation, f"cannot reach MySQL at {where}: {text}")
    return StoreError(operation, f"{text} (MySQL error {code})" if code else text,
                      contended=code in CONTENDED)
