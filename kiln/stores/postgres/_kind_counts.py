"""PostgreSQL: jobs by kind and state (the dashboard's Kinds page) at a cost that does
not grow with the table.

No index leads with the kind, so the plain ``GROUP BY kind, state`` read every job
(272 ms for the Kinds page's first request at 1,000,000 jobs, bench/RESULTS.md). Here
each state's jobs are read through that state's index (kiln_jobs_state_queue, or the
available jobs' kiln_jobs_claim and kiln_jobs_conc_available) up to ``cap + 1`` rows:
a state with at most ``cap`` jobs is counted exactly, by kind. A state past the cap is
estimated, by kind, from the sample kiln.stores.postgres._counts reads (at most
SAMPLE_PAGES pages, REPEATABLE), each kind's figure never below the jobs of it the
capped read saw, and marked ``estimated``. So a read costs at most (states x cap)
index entries plus SAMPLE_PAGES pages, whatever the table holds. The limit: a kind
rare among the many jobs of such a state (fewer than one in the sample's share of the
pages) may be missing from that state's column; the Jobs tab filtered by the kind
lists and counts them. An index on (state, kind) that would let every pair be found
and counted up to the cap costs every job's every state change: docs/adr/0019.
"""

from __future__ import annotations

from collections import Counter

from kiln._model._job import JobState, KindCount
from kiln.stores.postgres import _counts
from kiln.stores.postgres._plan import Plan, one

_OTHERS = [s.value for s in JobState if s is not JobState.AVAILABLE]
_PART = ("(SELECT kind, {label} AS s FROM kiln_jobs WHERE {cond}"
         " ORDER BY {order} LIMIT %s)")
PARTS = [
    *(_PART.format(label=f"'{s}'", cond=f"state = '{s}' AND state <> 'available'",
                   order="queue, id") for s in _OTHERS),
    _PART.format(label="'available'", cond="state = 'available' AND conc_key IS NULL",
                 order="queue, kind"),
    _PART.format(label="'available*'", cond="state = 'available' AND conc_key IS NOT NULL",
                 order="conc_key"),
]
CAPPED = ("SELECT kind, s, count(*) FROM (" + " UNION ALL ".join(PARTS) + ") AS c"
          " GROUP BY kind, s")
SAMPLE = (
    "SELECT kind, state, count(*) FROM kiln_jobs TABLESAMPLE SYSTEM (%s::real)"
    " REPEATABLE (45) WHERE state = ANY(%s::text[]) GROUP BY kind, state"
)


def kind_counts(cap: int) -> Plan[list[KindCount]]:
    """Jobs by kind and state: exact for a state with at most ``cap`` jobs, estimated
    (marked) for one with more."""
    rows = (yield one(CAPPED, *([cap + 1] * len(PARTS)), prepare=True))[0]
    seen: Counter[tuple[str, str]] = Counter()
    per_label: Counter[str] = Counter()
    for kind, label, n in rows:
        seen[(str(kind), str(label).rstrip("*"))] += int(n)
        per_label[str(label)] += int(n)
    over = sorted({label.rstrip("*") for label, n in per_label.items() if n > cap})
    estimates: dict[tuple[str, str], int] = {}
    if over:
        pages = int((yield one(_counts._PAGES))[0][0][2])
        percent = min(100.0, 100.0 * _counts.SAMPLE_PAGES / pages)
        sampled = (yield one(SAMPLE, percent, over))[0]
        estimates = {(str(r[0]), str(r[1])): round(int(r[2]) * 100.0 / percent)
                     for r in sampled}
        if percent >= 100.0:  # the whole table was read: exact
            for k, n in estimates.items():
                seen[k] = n
            over, estimates = [], {}
    out = []
    for key in sorted(set(seen) | set(estimates)):
        kind, state = key
        if state in over:
            n = max(seen.get(key, 0), estimates.get(key, 0))
            out.append(KindCount(kind, JobState(state), n, estimated=True))
        elif seen[key]:
            out.append(KindCount(kind, JobState(state), seen[key]))
    return out
