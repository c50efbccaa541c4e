"""SQLite: a listing's page read one index range at a time, when its filter names
states, a queue or a kind, so that it costs what the page holds, not what the table
holds.

``SELECT ... WHERE state IN (?) ORDER BY id DESC LIMIT ?`` ran as ``SCAN kiln_jobs``:
the statistics say a state matches half the table, so SQLite walked the rowid
backwards checking every row's state rather than read kiln_jobs_state_queue and sort.
With a few jobs running under 10,000,000 waiting, the Servers page's running jobs read
the whole table (742 ms a request; bench/RESULTS.md, "list45").

Within one (state, queue) range of kiln_jobs_state_queue (state, queue, id), or one
(state, kind) range of kiln_jobs_state_kind, the ids are in order. Every job the filter
matches lies in exactly one such range, so the page is the first ``limit`` rows of the
merge of the ranges, each read in id order with the whole filter checked on its rows.
The merge reads each range lazily (a cursor steps only when its row is taken): about
one index descent a range plus the page's rows. The ranges' values come from a loose
scan of the index, one descent each. All of it runs in one read transaction, so the
page is one snapshot, as the single statement's was.

Knows nothing of how a filter compiles (kiln.stores.sqlite._admin gives the WHERE
clause) and is used for listings only, never for bulk actions.
"""

from __future__ import annotations

import heapq
import itertools
import json
import sqlite3
from typing import Any

from kiln._model._job import JobFilter
from kiln.stores._filters import keyset, ranged

INDEXES = {"queue": "kiln_jobs_state_queue", "kind": "kiln_jobs_state_kind"}

# Ranges one page may merge: each is an open statement. Past it (thousands of queues
# and kinds under the states asked for) the single statement reads the page instead.
MAX_RANGES = 100

Range = tuple[str, str, str]  # (index column, state, value)


def page_rows(
    conn: sqlite3.Connection, f: JobFilter, where: tuple[str, list[Any]], cols: str,
    limit: int, before_id: int | None, after_id: int | None,
) -> list[Any] | None:
    """The rows of the page of ``f`` (newest first below ``before_id``, oldest first
    above ``after_id``) merged from its index ranges; ``where`` is ``f`` compiled.
    None: not a filter the ranges serve (kiln.stores._filters.ranged), or more than
    MAX_RANGES ranges."""
    if not ranged(f) or limit < 0:
        return None
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")  # deferred: one read snapshot for the ranges and the rows
    try:
        ranges = _ranges(conn, f)
        if ranges is None:
            return None
        ids = _merged(conn, ranges, where, limit, before_id, after_id)
        order = "ASC" if after_id is not None else "DESC"
        return conn.execute(
            f"SELECT {cols} FROM kiln_jobs WHERE id IN (SELECT value FROM json_each(?))"
            f" ORDER BY id {order}", [json.dumps(ids)],
        ).fetchall()
    finally:
        if began:
            conn.execute("COMMIT")


def _ranges(conn: sqlite3.Connection, f: JobFilter) -> list[Range] | None:
    """The (column, state, value) ranges holding every job ``f`` can match."""
    states = sorted({s.value for s in f.states}) or _distinct(conn, "queue", None, None)
    if states is None:
        return None  # not reached: there are never more than MAX_RANGES states
    # both a kind and a queue: the kind's ranges, the queue checked on their rows (a
    # kind is usually the narrower; either index holds both ranges' ids in order)
    for column, value in (("kind", f.kind), ("queue", f.queue)):
        if value is not None:
            return [(column, state, value) for state in states]
    for column in INDEXES:  # states alone: the queues under them, else the kinds
        found: list[Range] = []
        for state in states:
            values = _distinct(conn, column, state, MAX_RANGES - len(found))
            if values is None:
                break
            found += [(column, state, v) for v in values]
        else:
            return found
    return None


def _distinct(
    conn: sqlite3.Connection, column: str, state: str | None, cap: int | None
) -> list[str] | None:
    """The distinct states (``state`` None), or ``column``'s distinct values under
    ``state``, by a loose scan of its index: one descent a value. None: more than
    ``cap`` of them."""
    index = INDEXES[column]
    key, fixed = ("state", "") if state is None else (column, "state = ? AND ")
    first = (f"SELECT {key} FROM kiln_jobs INDEXED BY {index} WHERE {fixed}1=1"
             f" ORDER BY {key} LIMIT 1")
    after = first.replace("1=1", f"{key} > ?")
    head = [] if state is None else [state]
    found: list[str] = []
    row = conn.execute(first, head).fetchone()
    while row is not None:
        if cap is not None and len(found) == cap:
            return None
        found.append(row[0])
        row = conn.execute(after, [*head, row[0]]).fetchone()
    return found


def _merged(
    conn: sqlite3.Connection, ranges: list[Range], where: tuple[str, list[Any]],
    limit: int, before_id: int | None, after_id: int | None,
) -> list[int]:
    """The first ``limit`` ids of the ranges' merge in the page's id order."""
    cursors: list[sqlite3.Cursor] = []
    try:
        order = "DESC"
        for column, state, value in ranges:
            cond, params = where[0], list(where[1])
            cond, order = keyset(cond, params, before_id, after_id, "?")
            cursors.append(conn.execute(
                f"SELECT id FROM kiln_jobs INDEXED BY {INDEXES[column]}"
                f" WHERE state = ? AND {column} = ? AND {cond} ORDER BY id {order}",
                [state, value, *params],
            ))
        merged = heapq.merge(*cursors, key=_id, reverse=order == "DESC")
        return [_id(row) for row in itertools.islice(merged, limit)]
    finally:
        for cursor in cursors:  # an unfinished statement would hold the snapshot open
            cursor.close()


def _id(row: Any) -> int:
    return int(row[0])
