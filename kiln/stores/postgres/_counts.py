"""PostgreSQL: counts and ages whose cost does not grow with the table.

Owns the capped counts by queue and state (``Client.counts(cap=...)``, what the
dashboard and kilnotel read every few seconds) and the age of each queue's oldest
available job. With ten million jobs waiting, a ``GROUP BY`` over them read them all:
3.6 s of a core every 5 s for kilnotel's gauges, 0.5 s for the dashboard's tabs at a
million (bench/RESULTS.md, "A large backlog").

Counts: the (state, queue) pairs are found by a loose index scan (one descent of
kiln_jobs_state_queue, or of kiln_jobs_claim for the available jobs, per pair), and
each pair is counted through its index range up to ``cap + 1`` rows: exact up to the
cap. The pairs past it are estimated from a sample of at most SAMPLE_PAGES pages of
the table (``TABLESAMPLE SYSTEM``, the visible rows of those pages scaled by the share
of pages read) and marked ``estimated``, never below ``cap + 1``. So a read costs at
most (pairs x cap) index entries plus SAMPLE_PAGES pages, whatever the table holds.
The available jobs of concurrency-limited queues (kiln_jobs_conc_available, whose
first column is the key) are counted together up to the cap; past it every queue's
available count is estimated. Each capped read is ordered as its index is, so the
planner walks the index rather than the table (a LIMIT over a scan of the table looked
cheap to it on a small table, and reads the whole table where the rows are rare).

Ages: the first entry of each (queue, kind, priority) group of kiln_jobs_claim (and
of each (key, queue, priority) group of kiln_jobs_conc_available) is that group's
oldest run_at, found by the same loose scan: one descent per group, not per job.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import JobState, StateCount
from kiln.stores.postgres._plan import Plan, one

SAMPLE_PAGES = 1000  # at most this many of the table's pages are read for an estimate

_PLAIN = "state = 'available' AND conc_key IS NULL"  # kiln_jobs_claim's predicate
_LIMITED = "state = 'available' AND conc_key IS NOT NULL"  # kiln_jobs_conc_available's

# the queues with plain available jobs, one min() through kiln_jobs_claim each
_QUEUES = (
    f"aq(queue) AS (SELECT min(queue) FROM kiln_jobs WHERE {_PLAIN}"
    " UNION ALL SELECT (SELECT min(k.queue) FROM kiln_jobs k WHERE k.state = 'available'"
    " AND k.conc_key IS NULL AND k.queue > aq.queue) FROM aq WHERE aq.queue IS NOT NULL)"
)
_PLAIN_COUNTS = (
    "SELECT aq.queue, 'available', (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = 'available' AND j.conc_key IS NULL AND j.queue = aq.queue"
    " ORDER BY j.kind LIMIT %s) c), 'p' FROM aq WHERE aq.queue IS NOT NULL"
)
_LIMITED_COUNTS = (
    f"SELECT queue, 'available', count(*), 'l' FROM (SELECT queue FROM kiln_jobs"
    f" WHERE {_LIMITED} ORDER BY conc_key LIMIT %s) l GROUP BY queue"
)
# the (state, queue) pairs of the other states, through kiln_jobs_state_queue
_PAIRS = (
    "op(state, queue) AS ((SELECT state, queue FROM kiln_jobs WHERE state <> 'available'"
    " ORDER BY state, queue LIMIT 1) UNION ALL SELECT n.state, n.queue FROM op"
    " CROSS JOIN LATERAL (SELECT k.state, k.queue FROM kiln_jobs k WHERE k.state <> 'available'"
    " AND (k.state, k.queue) > (op.state, op.queue) ORDER BY k.state, k.queue LIMIT 1) n)"
)
_OTHER_COUNTS = (
    "SELECT op.queue, op.state, (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = op.state AND j.queue = op.queue AND j.state <> 'available'"
    " ORDER BY j.id LIMIT %s) c), 'o' FROM op"
)
_PAGES = ("SELECT NULL, NULL, greatest(pg_relation_size('kiln_jobs')"
          " / current_setting('block_size')::int, 1), 'n'")
# REPEATABLE: the same pages at every refresh (while the table keeps its size), so an
# estimate moves with the jobs, not with the draw: a flat backlog reads flat, and
# deriv() over it (KilnQueueBacklogGrowing) sees no sampling noise
SAMPLE = (
    "SELECT queue, state, count(*) FROM kiln_jobs TABLESAMPLE SYSTEM (%s::real)"
    " REPEATABLE (45) WHERE state = ANY(%s::text[]) GROUP BY queue, state"
)


def counts_sql(states: Sequence[JobState] | None) -> tuple[str, int] | None:
    """The capped counts' statement for ``states`` (every state when None) and how many
    ``LIMIT`` parameters it takes; None when nothing is asked for."""
    if states is None:
        want_available, names = True, None
    else:
        want_available = JobState.AVAILABLE in states
        names = sorted({JobState(s).value for s in states} - {"available"})
    ctes, parts, limits = [], [], 0
    if want_available:
        ctes.append(_QUEUES)
        parts += [_PLAIN_COUNTS, _LIMITED_COUNTS]
        limits += 2
    if names is None or names:
        # literal states (JobState values), so the plan is the same at every refresh
        # the loose scan walks every state's pairs (one descent each: a list of states
        # in its index condition made each step scan the rest of the state's range)
        ctes.append(_PAIRS)
        listed = "" if names is None else f" WHERE op.state IN ({', '.join(map(repr, names))})"
        parts.append(_OTHER_COUNTS + listed)
        limits += 1
    if not parts:
        return None
    parts.append(_PAGES)
    return "WITH RECURSIVE " + ", ".join(ctes) + " " + " UNION ALL ".join(parts), limits


def _tally(
    rows: Sequence[tuple[object, ...]], cap: int,
) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]], int, int]:
    """A capped read's rows, ``(a, b, n, part)``: part "p" is a pair counted up to the
    cap, "l" a share of the limited jobs (counted together up to the cap), "n" the
    table's pages. Gives the counts by pair, the pairs past the cap, the limited jobs
    counted and the pages."""
    exact: dict[tuple[str, str], int] = {}
    over: set[tuple[str, str]] = set()
    limited, pages = 0, 1
    for a, b, n, part in rows:
        count = int(str(n))
        if part == "n":
            pages = count
            continue
        key = (str(a), str(b))
        exact[key] = exact.get(key, 0) + count
        if part == "l":
            limited += count
        elif count > cap:
            over.add(key)
    return exact, over, limited, pages


def capped_counts(states: Sequence[JobState] | None, cap: int) -> Plan[list[StateCount]]:
    """Jobs by queue and state, exact up to ``cap`` per pair, estimated above (see the
    module's docstring)."""
    built = counts_sql(states)
    if built is None:
        return []
    sql, limits = built
    rows = (yield one(sql, *([cap + 1] * limits), prepare=True))[0]
    exact, over, limited, pages = _tally(rows, cap)
    if limited > cap:  # the limited part was cut at the cap: no queue's is exact
        over |= {k for k in exact if k[1] == "available"}
    estimates: dict[tuple[str, str], int] = {}
    if over or limited > cap:
        percent = min(100.0, 100.0 * SAMPLE_PAGES / pages)
        wanted = sorted({k[1] for k in over} | ({"available"} if limited > cap else set()))
        sampled = (yield one(SAMPLE, percent, wanted))[0]
        estimates = {(str(r[0]), str(r[1])): round(int(r[2]) * 100.0 / percent)
                     for r in sampled}
        if percent >= 100.0:  # the whole table was read: these are exact counts
            exact.update((k, v) for k, v in estimates.items() if k in over)
            over = set()
        elif limited > cap:  # queues whose limited jobs the capped part never reached
            over |= {k for k in estimates if k[1] == "available"}
    out = []
    for key in sorted(set(exact) | over):
        queue, state = key
        if key in over:
            n = max(cap + 1, exact.get(key, 0), estimates.get(key, 0))
            out.append(StateCount(queue=queue, state=JobState(state), count=n, estimated=True))
        else:
            out.append(StateCount(queue=queue, state=JobState(state), count=exact[key]))
    return out


# available jobs by (queue, kind): the pairs by a loose scan of kiln_jobs_claim (its
# first two columns), each counted up to the cap; the limited ones counted together
_KIND_PAIRS = (
    "WITH RECURSIVE qk(queue, kind) AS ((SELECT queue, kind FROM kiln_jobs"
    f" WHERE {_PLAIN} ORDER BY queue, kind LIMIT 1) UNION ALL SELECT n.queue, n.kind"
    " FROM qk CROSS JOIN LATERAL (SELECT k.queue, k.kind FROM kiln_jobs k"
    " WHERE k.state = 'available' AND k.conc_key IS NULL AND (k.queue, k.kind)"
    " > (qk.queue, qk.kind) ORDER BY k.queue, k.kind LIMIT 1) n)"
    " SELECT qk.queue, qk.kind, (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = 'available' AND j.conc_key IS NULL AND j.queue = qk.queue"
    " AND j.kind = qk.kind ORDER BY j.priority LIMIT %s) c), 'p' FROM qk"
    " UNION ALL SELECT queue, kind, count(*), 'l' FROM (SELECT queue, kind FROM kiln_jobs"
    f" WHERE {_LIMITED} ORDER BY conc_key LIMIT %s) l GROUP BY queue, kind UNION ALL {_PAGES}"
)
KIND_SAMPLE = (
    "SELECT queue, kind, count(*) FROM kiln_jobs TABLESAMPLE SYSTEM (%s::real)"
    " REPEATABLE (45) WHERE state = 'available' GROUP BY queue, kind"
)


def capped_available_by_kind(cap: int) -> Plan[list[tuple[str, str, int]]]:
    """(queue, kind, available jobs): exact up to ``cap`` a pair, estimated above it
    (never below ``cap + 1``) from the same sample as the counts'."""
    rows = (yield one(_KIND_PAIRS, cap + 1, cap + 1, prepare=True))[0]
    exact, over, limited, pages = _tally(rows, cap)
    if limited > cap:
        over |= set(exact)
    if over:
        percent = min(100.0, 100.0 * SAMPLE_PAGES / pages)
        sampled = (yield one(KIND_SAMPLE, percent))[0]
        estimates = {(str(r[0]), str(r[1])): round(int(r[2]) * 100.0 / percent)
                     for r in sampled}
        if percent >= 100.0:
            return sorted((q, k, n) for (q, k), n in estimates.items())
        if limited > cap:
            over |= set(estimates)
        exact.update({key: max(cap + 1, exact.get(key, 0), estimates.get(key, 0))
                      for key in over})
    return sorted((q, k, n) for (q, k), n in exact.items())


# the oldest run_at of each (queue, kind, priority) group of kiln_jobs_claim and each
# (key, queue, priority) group of kiln_jobs_conc_available: one descent per group
OLDEST = (
    "WITH RECURSIVE pg(queue, kind, priority, run_at) AS ((SELECT queue, kind, priority,"
    f" run_at FROM kiln_jobs WHERE {_PLAIN} ORDER BY queue, kind, priority, run_at LIMIT 1)"
    " UNION ALL SELECT n.* FROM pg CROSS JOIN LATERAL (SELECT k.queue, k.kind, k.priority,"
    " k.run_at FROM kiln_jobs k WHERE k.state = 'available' AND k.conc_key IS NULL"
    " AND (k.queue, k.kind, k.priority) > (pg.queue, pg.kind, pg.priority)"
    " ORDER BY k.queue, k.kind, k.priority, k.run_at LIMIT 1) n),"
    " lg(conc_key, queue, priority, run_at) AS ((SELECT conc_key, queue, priority, run_at"
    f" FROM kiln_jobs WHERE {_LIMITED} ORDER BY conc_key, queue, priority, run_at LIMIT 1)"
    " UNION ALL SELECT n.* FROM lg CROSS JOIN LATERAL (SELECT k.conc_key, k.queue,"
    " k.priority, k.run_at FROM kiln_jobs k WHERE k.state = 'available'"
    " AND k.conc_key IS NOT NULL AND (k.conc_key, k.queue, k.priority)"
    " > (lg.conc_key, lg.queue, lg.priority)"
    " ORDER BY k.conc_key, k.queue, k.priority, k.run_at LIMIT 1) n)"
    " SELECT queue, greatest(extract(epoch FROM now() - min(run_at)), 0)::float8"
    " FROM (SELECT queue, run_at FROM pg UNION ALL SELECT queue, run_at FROM lg) a"
    " GROUP BY queue"
)


def oldest_available() -> Plan[dict[str, float]]:
    rows = (yield one(OLDEST, prepare=True))[0]
    return {r[0]: float(r[1]) for r in rows}
