"""SQLite: the capped counts (``cap``: what the dashboard and kilnotel ask with) at a
cost that does not grow with the table.

The exact reads (``GROUP BY`` over the states asked for) walked every job of them: the
live states' counts took 0.87 s and the available jobs by queue and kind 7.5 s, every
5 s, with 10,000,000 jobs waiting (bench/RESULTS.md, "scale45"). Here the pairs are
found by a loose scan (one descent of kiln_jobs_state_queue or kiln_jobs_state_kind a
pair, both leading with the state), each pair is counted through that index up to
``cap + 1`` rows, and whatever passed the cap is estimated from a bounded sample of
the ids (kiln.stores._sample), by the rule of kiln.stores._capped.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from kiln._model._job import JobState, KindCount, RateLimit, StateCount
from kiln.stores import _capped
from kiln.stores._sample import BOUNDS, EMPTY, Sample, sample_of, strata, stratum_sql

ALL_STATES = tuple(s.value for s in JobState)


def _values(conn: sqlite3.Connection, index: str, col: str, state: str) -> list[str]:
    """The distinct ``col`` of ``state``'s jobs, one descent of ``index`` each (the
    state a literal, a JobState value: a partial index's predicate must be seen)."""
    head = (f"SELECT {col} FROM kiln_jobs INDEXED BY {index}"
            f" WHERE state = '{JobState(state).value}' AND {col} IS NOT NULL")
    out: list[str] = []
    row = conn.execute(f"{head} ORDER BY {col} LIMIT 1").fetchone()
    while row is not None:
        out.append(row[0])
        row = conn.execute(f"{head} AND {col} > ? ORDER BY {col} LIMIT 1", (row[0],)).fetchone()
    return out


def _counted(conn: sqlite3.Connection, index: str, col: str, states: Sequence[str],
             cap: int) -> dict[tuple[str, str], int]:
    """(value, state) -> jobs, counted through ``index`` up to ``cap + 1``."""
    sql = (f"SELECT COUNT(*) FROM (SELECT 1 FROM kiln_jobs INDEXED BY {index}"
           f" WHERE state = ? AND {col} = ? LIMIT ?)")
    return {(v, s): int(conn.execute(sql, (s, v, cap + 1)).fetchone()[0])
            for s in states for v in _values(conn, index, col, s)}


def sample(conn: sqlite3.Connection, cols: Sequence[str]) -> Sample:
    lo, hi = conn.execute(BOUNDS).fetchone()
    if lo is None:
        return EMPTY
    jobs, top = stratum_sql(cols)
    rows: list[tuple[object, ...]] = []
    tops: dict[int, int | None] = {}
    for s, bounds in enumerate(strata(lo, hi)):
        rows += [(s, *r) for r in conn.execute(jobs, bounds).fetchall()]
        tops[s] = conn.execute(top, bounds).fetchone()[0]
    return sample_of(rows, tops)


def state_counts(conn: sqlite3.Connection, states: Sequence[JobState] | None,
                 cap: int) -> list[StateCount]:
    names = ALL_STATES if states is None else sorted({JobState(s).value for s in states})
    counted = _counted(conn, "kiln_jobs_state_queue", "queue", names, cap)
    if not _capped.over(counted, cap):
        return _capped.state_counts(counted, cap, None)
    return _capped.state_counts(counted, cap, sample(conn, ("queue", "state")))


def kind_counts(conn: sqlite3.Connection, cap: int) -> list[KindCount]:
    cap = min(cap, _capped.PAIR_CAP)
    counted = _counted(conn, "kiln_jobs_state_kind", "kind", ALL_STATES, cap)
    if not _capped.over(counted, cap):
        return _capped.kind_counts(counted, cap, None)
    return _capped.kind_counts(counted, cap, sample(conn, ("kind", "state")))


def available_by_kind(conn: sqlite3.Connection, cap: int) -> list[tuple[str, str, int]]:
    sql = ("SELECT queue, COUNT(*) FROM (SELECT queue FROM kiln_jobs INDEXED BY"
           " kiln_jobs_state_kind WHERE state = 'available' AND kind = ? LIMIT ?) GROUP BY queue")
    counted = [(str(q), kind, int(n))
               for kind in _values(conn, "kiln_jobs_state_kind", "kind", "available")
               for q, n in conn.execute(sql, (kind, cap + 1)).fetchall()]
    if not _capped.kind_over(counted, cap):
        return _capped.available_by_kind(counted, cap, None)
    return _capped.available_by_kind(
        counted, cap, _capped.available(sample(conn, _capped.AVAILABLE_COLS)))


# each rate key's due pending jobs, through kiln_jobs_pending (rate_key, run_at, id;
# partial: pending jobs only), up to the cap
_DUE = ("SELECT COUNT(*) FROM (SELECT 1 FROM kiln_jobs INDEXED BY kiln_jobs_pending"
        " WHERE state = 'pending' AND rate_key = ? AND run_at <= ? LIMIT ?)")
_LIMITS = "SELECT key, rate, per, burst FROM kiln_rate_limits WHERE key IN ({})"


def rate_keys_backlog(conn: sqlite3.Connection, limit: int,
                      cap: int) -> list[tuple[str, RateLimit | None, int]]:
    """The ``limit`` keys with the most due pending jobs, each counted exactly up to
    ``cap`` and estimated above (one descent a key, then at most ``cap + 1`` entries)."""
    now = time.time()
    counted = {k: int(conn.execute(_DUE, (k, now, cap + 1)).fetchone()[0])
               for k in _values(conn, "kiln_jobs_pending", "rate_key", "pending")}
    due = None
    if any(n > cap for n in counted.values()):
        due = _capped.due_pending(sample(conn, ("rate_key", "state", f"run_at <= {now!r}")))
    top = _capped.rate_backlog(counted, cap, due, limit)
    keys = [k for k, _ in top]
    limits = {r[0]: RateLimit(rate=r[1], per=r[2], burst=r[3]) for r in conn.execute(
        _LIMITS.format(", ".join("?" * len(keys))), keys).fetchall()}
    return [(k, limits.get(k), n) for k, n in top]
