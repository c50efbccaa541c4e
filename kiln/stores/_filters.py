"""The rules every store shares for admin operations: which states each one may
touch, how a ``JobFilter`` becomes a WHERE clause, and how a listing pages.

The filter's shape (which conditions, in which order, joined by AND) is decided
here once; a dialect gives only its own SQL pieces in a ``FilterSql``: how it
writes a placeholder, "true", a membership test, an error-text match, the tag and
JSON-key conditions, and how it passes a timestamp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from kiln._model._job import JobFilter

# the states an admin operation may move a job out of
REQUEUEABLE = ("failed", "cancelled", "completed", "scheduled", "available", "awaiting")
CANCELLABLE = ("awaiting", "pending", "scheduled", "available", "running")
DELETABLE = ("awaiting", "pending", "scheduled", "available", "failed", "cancelled", "completed")
MAKE_DUE = ("scheduled", "pending")

Clauses = tuple[list[str], list[Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class FilterSql:
    """One dialect's pieces of a WHERE clause."""

    mark: str  # a placeholder: "%s" or "?"
    true: str  # what an empty filter matches with
    # (column, values, SQL type of the values) -> a membership test and its params
    member: Callable[[str, Sequence[Any], str], Clauses]
    errors: Callable[[str], Clauses]  # some error message of the job contains the text
    last_error: Callable[[str], Clauses]  # the last attempt's error message is the text
    tagged: Callable[[JobFilter], Clauses]  # all the tags, metadata and args pairs
    when: Callable[[datetime], Any]  # a timestamp as the driver passes it


def members(mark: str) -> Callable[[str, Sequence[Any], str], Clauses]:
    """``column IN (?, ?, ...)``: the membership test of dialects without arrays."""

    def member(column: str, values: Sequence[Any], _type: str) -> Clauses:
        return [f"{column} IN ({', '.join([mark] * len(values))})"], list(values)

    return member


def compile_filter(
    f: JobFilter, sql: FilterSql, allowed: Sequence[str] | None = None
) -> tuple[str, list[Any]]:
    """The WHERE clause (without the keyword) and its params for ``f``; ``allowed``
    restricts the states further (an operation's own set, such as REQUEUEABLE)."""
    clauses: list[str] = []
    params: list[Any] = []

    def add(part: Clauses) -> None:
        clauses.extend(part[0])
        params.extend(part[1])

    if f.states:
        add(sql.member("state", [s.value for s in f.states], "text"))
    if allowed is not None:
        add(sql.member("state", list(allowed), "text"))
    for column, value in (("queue", f.queue), ("kind", f.kind)):
        if value is not None:
            add(([f"{column} = {sql.mark}"], [value]))
    if f.error:
        add(sql.errors(f.error))
    if f.last_error is not None:
        add(sql.last_error(f.last_error))
    if f.ids:
        add(sql.member("id", list(f.ids), "bigint"))
    if f.tags or f.metadata or f.args:
        add(sql.tagged(f))
    add(_bounds(f, sql))
    return (" AND ".join(clauses) or sql.true), params


def _bounds(f: JobFilter, sql: FilterSql) -> Clauses:
    clauses: list[str] = []
    params: list[Any] = []
    if f.max_id is not None:
        clauses.append(f"id <= {sql.mark}")
        params.append(f.max_id)
    if f.min_id is not None:
        clauses.append(f"id >= {sql.mark}")
        params.append(f.min_id)
    for condition, at in (
        ("finished_at <=", f.finished_before),
        ("created_at >=", f.created_after),
        ("created_at <", f.created_before),
    ):
        if at is not None:
            clauses.append(f"{condition} {sql.mark}")
            params.append(sql.when(at))
    return clauses, params


def ranged(f: JobFilter) -> bool:
    """Whether a listing of ``f`` may be read as a merge of index ranges in id order
    ((state, queue, id) or (state, kind, id), the stores that read them say which): it
    names states, a queue or a kind, and nothing else but id bounds, which those
    indexes hold too. A condition checked on the rows (error text, tags, metadata,
    args, times) may match few of a range's jobs, and the merge would then read whole
    ranges row by row in index order: slower than the primary key's walk (1.4 s against
    92 ms for an args filter over 2,000,000 jobs on SQLite, bench/RESULTS.md "list45"),
    so those keep the single statement (the dashboard bounds them by an id window,
    kiln.web._jobs.scan_window). Ids: their primary key lookups are cheaper."""
    times = (f.finished_before, f.created_after, f.created_before)
    if f.error or f.last_error is not None or f.ids or f.tags or f.metadata or f.args \
            or any(t is not None for t in times):
        return False
    return bool(f.states) or f.queue is not None or f.kind is not None


ERROR_GROUP_SCAN = 10_000  # newest failed jobs an error grouping reads, at most


def keyset(
    cond: str, params: list[Any], before_id: int | None, after_id: int | None, mark: str
) -> tuple[str, str]:
    """``cond`` narrowed to the page past the cursor (``params`` extended), and the
    page's order: newest first below ``before_id``, oldest first above ``after_id``."""
    if before_id is not None:
        cond += f" AND id < {mark}"
        params.append(before_id)
    if after_id is not None:
        cond += f" AND id > {mark}"
        params.append(after_id)
    return cond, "ASC" if after_id is not None else "DESC"


def page(
    f: JobFilter, sql: FilterSql, cols: str, before_id: int | None, after_id: int | None
) -> tuple[str, list[Any]]:
    """A listing's page of ``cols`` under ``f`` (see ``keyset``) and its params; the
    value of its LIMIT, the last placeholder, is the caller's."""
    cond, params = compile_filter(f, sql)
    cond, order = keyset(cond, params, before_id, after_id, sql.mark)
    return (
        f"SELECT {cols} FROM kiln_jobs WHERE {cond} ORDER BY id {order} LIMIT {sql.mark}",
        params,
    )
