"""The WHERE clause of an audit-log read (kiln._model._job.AuditQuery), shared by the
three stores. Owns the conditions only; each store passes its own "actor contains"
expression and its own form of the two times (aware datetimes, naive UTC datetimes or
epoch seconds). Placeholders are ``%s`` (SQLite's caller turns them into ``?``)."""

from __future__ import annotations

from typing import Any

from kiln._model._job import AuditQuery


def audit_where(q: AuditQuery, contains: str, since: Any, until: Any,
                at: str = "at") -> tuple[str, list[Any]]:
    """(`` WHERE ...`` or "", its parameters in order). ``at``: how the store reads the
    time column as the times it hands out (SQLite rounds its REAL seconds to the
    microseconds a datetime holds, so an entry's own ``at`` finds it)."""
    conditions: list[str] = []
    params: list[Any] = []
    for sql, value in (("action = %s", q.action), (contains, q.actor),
                       (f"{at} >= %s", since), (f"{at} < %s", until), ("id < %s", q.before)):
        if value is not None:
            conditions.append(sql)
            params.append(value)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params
