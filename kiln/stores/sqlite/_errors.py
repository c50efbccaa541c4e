"""How sqlite3's errors become kiln's (see kiln.stores._translator): a missing table
is NotMigratedError, anything else StoreError. An OverflowError counts as the
driver's: sqlite3 raises it for an integer beyond 64 bits. A file that cannot be
opened is UnreachableError, raised where it is opened (_store.connect).
"""

from __future__ import annotations

import sqlite3

from kiln._errors import NotMigratedError, StoreError


def is_driver_error(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.Error | OverflowError)


def translate(operation: str, where: str, exc: BaseException) -> StoreError:
    """A kiln error for a sqlite3 error, to be raised ``from`` it."""
    if isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc):
        return NotMigratedError(
            operation, f"the kiln schema is missing: run `kiln migrate` ({exc})"
        )
    # the file stayed locked past busy_timeout: another writer held it
    busy = isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
    return StoreError(operation, str(exc), contended=busy)
