"""SQLite: a batch of plain jobs inserted as runs that share every column but their args.

sqlite3's ``executemany`` binds and steps every row from Python, a few µs a row: more
than the rest of an enqueue. The jobs of a batch mostly differ only in their args (a
kind's options are the same for each), so each run of consecutive jobs that share every
other column is one statement: the shared values bound once, the args texts as one JSON
array of strings that ``json_each`` unrolls (it unquotes each string: the stored text is
the encoded one, byte for byte). ``json_each`` yields an array's elements in order and an
INSERT from that one scan writes them as they come, so the rows take consecutive ids in
the jobs' order (``tests/stores/test_conformance_insert_claim.py`` checks every id's
args). Jobs with dependencies or a rate limit to declare are not here.

Unique jobs (``KeyedRun``) are runs too: consecutive jobs that share every column but
their args and key, the keys sent as one ASCII blob of fixed-width keys that the row's
position in the array cuts (``substr`` of a blob is by byte, so a row's key costs the
same wherever it is; of a text it would walk the text from its start), plus what the run
shares at the end of each key (a period's bucket). ``ON CONFLICT DO NOTHING`` skips a
row whose key a job holds, one in the table or one this statement inserted before it.

Owns no transaction: the caller's holds the write lock from the first run to the commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from kiln._model._json import encode

# the columns a run shares, in the order a ``Run`` holds them; then the args
RUN_INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, metadata, priority, run_at, max_attempts,"
    " timeout, backoff, created_at, rate_key, unique_states, tags, args)"
    " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, value FROM json_each(?)"
)

# KEYED_INSERT's keys: Unique.key_of's, 40 ASCII characters each
KEY_CHARS = 40
KEYED_INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, metadata, priority, run_at, max_attempts,"
    " timeout, backoff, created_at, rate_key, tags, unique_states, args, unique_key)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, value,"
    f" CAST(substr(?15, key * {KEY_CHARS} + 1, {KEY_CHARS}) AS TEXT) || ?14"
    " FROM json_each(?16) WHERE true ON CONFLICT DO NOTHING"
)

# the values a run shares (queue, kind, state, metadata .. rate_key, tags: RUN_INSERT's
# first 12 parameters) and the args texts of its jobs, in order
Run = tuple[tuple[Any, ...], list[str]]


# a run of unique jobs: Run's shared values, then the unique_states and the end of the
# key (a period's "@bucket", or "") they share, their args texts and their keys, in order
KeyedRun = tuple[tuple[Any, ...], int, str, list[str], list[str]]


def insert_keyed_runs(conn: sqlite3.Connection, runs: Sequence[Run | KeyedRun]) -> int:
    """Insert each run's jobs, one statement a run; how many rows were inserted (a
    keyed run's duplicates are skipped)."""
    count = 0
    for run in runs:
        if len(run) == 2:
            values, texts = run
            count += conn.execute(RUN_INSERT, (*values, encode(texts))).rowcount
        else:
            values, states, tail, texts, keys = run
            count += conn.execute(KEYED_INSERT, (
                *values, states, tail, "".join(keys).encode("ascii"), encode(texts)
            )).rowcount
    return count


def insert_runs(conn: sqlite3.Connection, runs: Sequence[Run]) -> list[int]:
    """Insert each run's jobs, one statement a run; the new ids in the jobs' order."""
    count = 0
    for values, texts in runs:
        conn.execute(RUN_INSERT, (*values, encode(texts)))
        count += len(texts)
    last = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
    return list(range(last - count + 1, last + 1))
