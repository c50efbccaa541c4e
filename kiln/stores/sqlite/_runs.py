"""SQLite: a batch of plain jobs inserted as runs that share every column but their args.

sqlite3's ``executemany`` binds and steps every row from Python, a few µs a row: more
than the rest of an enqueue. The jobs of a batch mostly differ only in their args (a
kind's options are the same for each), so each run of consecutive jobs that share every
other column is one statement: the shared values bound once, the args texts as one JSON
array of strings that ``json_each`` unrolls (it unquotes each string: the stored text is
the encoded one, byte for byte). ``json_each`` yields an array's elements in order and an
INSERT from that one scan writes them as they come, so the rows take consecutive ids in
the jobs' order (``tests/stores/test_conformance_insert_claim.py`` checks every id's
args). Jobs with a unique key, dependencies or a rate limit to declare are not here.

Owns no transaction: the caller's holds the write lock from the first run to the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from kiln._json import encode

# the columns a run shares, in the order a ``Run`` holds them; then the args
RUN_INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, metadata, priority, run_at, max_attempts,"
    " timeout, backoff, created_at, rate_key, unique_states, tags, args)"
    " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, value FROM json_each(?)"
)

# the values a run shares (queue, kind, state, metadata .. rate_key, tags: RUN_INSERT's
# first 12 parameters) and the args texts of its jobs, in order
Run = tuple[tuple[Any, ...], list[str]]


def insert_runs(conn: sqlite3.Connection, runs: Sequence[Run]) -> list[int]:
    """Insert each run's jobs, one statement a run; the new ids in the jobs' order."""
    count = 0
    for values, texts in runs:
        conn.execute(RUN_INSERT, (*values, encode(texts)))
        count += len(texts)
    last = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
    return list(range(last - count + 1, last + 1))
