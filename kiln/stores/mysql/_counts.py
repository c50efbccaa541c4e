"""MariaDB/MySQL: the capped counts (``cap``: what the dashboard and kilnotel ask with)
at a cost that does not grow with the table.

The exact reads (``GROUP BY`` over the states asked for) walked every job of them:
with 3,000,000 jobs waiting the live states' counts took 3.0 s, the counts by kind
4.9 s and the available jobs by queue and kind 6.2 s (bench/RESULTS.md, "scale45"),
as long as kilnotel's 5 s between two. Here the pairs are found by a loose index scan
(``GROUP BY`` on the leading columns of kiln_jobs_claim (state, queue, ...) or
kiln_jobs_state_kind (state, kind, id): "Using index for group-by", one descent a
pair), each pair is counted through that index up to ``cap + 1`` rows in one
statement, and whatever passed the cap is estimated from a bounded sample of the ids
(kiln.stores._sample), by the rule of kiln.stores._capped.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import JobState, KindCount, RateLimit, StateCount
from kiln.stores import _capped
from kiln.stores._sample import BOUNDS, EMPTY, Sample, sample_of, sample_sql
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Stmt, marks, one, step


def _pairs(index: str, col: str, states: Sequence[str]) -> str:
    """The distinct (``col``, state) of ``states``' jobs, by a loose scan of ``index``."""
    names = ", ".join(repr(s) for s in states)  # JobState values only
    return (f"SELECT {col}, state FROM kiln_jobs FORCE INDEX ({index})"
            f" WHERE state IN ({names}) GROUP BY state, {col}")


def _counted(index: str, col: str, states: Sequence[str], cap: int,
             extra: str = "") -> Plan[dict[tuple[str, str], int]]:
    """(value, state) -> jobs (and ``extra``, a condition), counted through ``index`` up
    to ``cap + 1``."""
    pairs = [r for r in (yield one(_pairs(index, col, states)))[0].rows if r[0] is not None]
    if not pairs:
        return {}
    parts = [f"SELECT %s, %s, COUNT(*) FROM (SELECT 1 FROM kiln_jobs FORCE INDEX ({index})"
             f" WHERE state = %s AND {col} = %s{extra} LIMIT %s) AS c{i}"
             for i in range(len(pairs))]
    params = [p for v, s in pairs for p in (v, s, s, v, cap + 1)]
    rows = (yield one(" UNION ALL ".join(parts), *params))[0].rows
    return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}


def sample(cols: Sequence[str]) -> Plan[Sample]:
    lo, hi = (yield one(BOUNDS))[0].rows[0]
    if lo is None:
        return EMPTY
    jobs, tops = sample_sql(int(lo), int(hi), cols)
    got = yield step(Stmt(jobs), Stmt(tops), last=True)
    return sample_of(got[0].rows, {int(r[0]): r[1] for r in got[1].rows})


def state_counts(states: Sequence[JobState] | None, cap: int) -> Plan[list[StateCount]]:
    names = ([s.value for s in JobState] if states is None
             else sorted({JobState(s).value for s in states}))
    if not names:
        return []
    counted = yield from _counted("kiln_jobs_claim", "queue", names, cap)
    if not _capped.over(counted, cap):
        return _capped.state_counts(counted, cap, None)
    return _capped.state_counts(counted, cap, (yield from sample(("queue", "state"))))


def kind_counts(cap: int) -> Plan[list[KindCount]]:
    cap = min(cap, _capped.PAIR_CAP)
    counted = yield from _counted("kiln_jobs_state_kind", "kind",
                                  [s.value for s in JobState], cap)
    if not _capped.over(counted, cap):
        return _capped.kind_counts(counted, cap, None)
    return _capped.kind_counts(counted, cap, (yield from sample(("kind", "state"))))


def available_by_kind(cap: int) -> Plan[list[tuple[str, str, int]]]:
    kinds = [str(r[0]) for r in (yield one(
        _pairs("kiln_jobs_state_kind", "kind", ["available"])))[0].rows]
    if not kinds:
        return []
    parts = [f"SELECT queue, kind, COUNT(*) FROM (SELECT queue, kind FROM kiln_jobs FORCE INDEX"
             f" (kiln_jobs_state_kind) WHERE state = 'available' AND kind = %s LIMIT %s) AS c{i}"
             " GROUP BY queue, kind" for i in range(len(kinds))]
    params = [p for k in kinds for p in (k, cap + 1)]
    rows = (yield one(" UNION ALL ".join(parts), *params))[0].rows
    counted = [(str(r[0]), str(r[1]), int(r[2])) for r in rows]
    if not _capped.kind_over(counted, cap):
        return _capped.available_by_kind(counted, cap, None)
    return _capped.available_by_kind(
        counted, cap, _capped.available((yield from sample(_capped.AVAILABLE_COLS))))


_LIMITS = "SELECT `key`, rate, per, burst FROM kiln_rate_limits WHERE `key` IN ({})"


def rate_keys_backlog(limit: int, cap: int) -> Plan[list[tuple[str, RateLimit | None, int]]]:
    """The ``limit`` keys with the most due pending jobs, each counted exactly up to
    ``cap`` through kiln_jobs_pending (state, rate_key, run_at, id) and estimated above."""
    counted = {k: n for (k, _), n in (yield from _counted(
        "kiln_jobs_pending", "rate_key", ["pending"], cap, f" AND run_at <= {NOW}")).items()}
    due = None
    if any(n > cap for n in counted.values()):
        due = _capped.due_pending((yield from sample(("rate_key", "state", f"run_at <= {NOW}"))))
    top = _capped.rate_backlog(counted, cap, due, limit)
    if not top:
        return []
    keys = [k for k, _ in top]
    rows = (yield one(_LIMITS.format(marks(len(keys))), *keys))[0].rows
    limits = {str(r[0]): RateLimit(rate=r[1], per=r[2], burst=r[3]) for r in rows}
    return [(k, limits.get(k), n) for k, n in top]
