"""A bounded sample of the jobs, for the estimates of the stores without TABLESAMPLE
(MariaDB, SQLite): what their capped counts (kiln.stores._capped) report above the cap.

The ids from the lowest to the highest are cut into strata on a grid whose stride is a
power of two (so the strata stay put while jobs come and go, and move only when the
span of ids doubles or halves): between STRATA / 2 and STRATA + 1 of them. From the
start of each stratum at most PER_STRATUM jobs are read through the primary key. A
stratum that held fewer was read whole; one that held more was read up to its last
id read, and each of its jobs in the sample stands for (the stratum's ids / the ids read
of it) jobs of the table. So a sample reads at most
(STRATA + 1) x PER_STRATUM rows (about 33,000) and as many primary-key descents as
strata, whatever the table holds, and a table of fewer rows is read whole: exact.
Gaps in the ids (pruned or deleted jobs, ids a bulk insert reserved and never used)
cost nothing: a sparse stratum is read whole, and its jobs count once each.

The same stratified read as PostgreSQL's ``TABLESAMPLE SYSTEM``, by ids instead of
pages: jobs enqueued together (one queue's batch) sit together, so a stratum's rows
are alike, and the sample's spread is that of a cluster sample (measured against exact
counts in bench/RESULTS.md, "counts45").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

STRATA = 256  # at most STRATA + 1 strata over the ids (at least STRATA / 2 once big)
PER_STRATUM = 128  # jobs read from the start of each stratum, at most


# the lowest and highest ids, one primary-key descent each (SQLite optimises a lone MIN()
# or MAX() only: both in one SELECT read every row)
BOUNDS = "SELECT (SELECT MIN(id) FROM kiln_jobs), (SELECT MAX(id) FROM kiln_jobs)"


def grid(lo: int, hi: int) -> list[tuple[int, int]]:
    """The strata ``[a, b)`` over the ids ``lo`` to ``hi``, on a power-of-two grid."""
    stride = 1
    while stride * STRATA < hi - lo + 1:
        stride *= 2
    first = lo - lo % stride
    return [(a, a + stride) for a in range(first, hi + 1, stride)]


def strata(lo: int, hi: int) -> list[tuple[int, int]]:
    """The grid's strata cut to the ids ``lo`` to ``hi``: ``[start, end)`` each."""
    return [(max(a, lo), min(b, hi + 1)) for a, b in grid(lo, hi)]


def sample_sql(lo: int, hi: int, cols: Sequence[str]) -> str:
    """One statement reading the sample, grouped: rows ``(stratum, *cols, jobs, last
    id)``. The bounds are this module's integers, written into the statement; each
    stratum's read is a primary-key range cut at PER_STRATUM rows, in a derived table
    (neither MariaDB nor SQLite takes a bare ORDER BY ... LIMIT in a UNION's term)."""
    picked = ", ".join(cols)
    return " UNION ALL ".join(
        f"SELECT {i} AS s, {picked}, COUNT(*) AS n, MAX(id) AS top_id FROM (SELECT id, {picked}"
        f" FROM kiln_jobs WHERE id >= {start} AND id < {end}"
        f" ORDER BY id LIMIT {PER_STRATUM}) AS t{i} GROUP BY {picked}"
        for i, (start, end) in enumerate(strata(lo, hi))
    )


def stratum_sql(cols: Sequence[str], mark: str) -> str:
    """One stratum's read, rows ``(id, *cols)``, its bounds two ``mark`` parameters: for
    a store that reads the strata one statement each (SQLite, in process: 196 reads in
    a loop took 26 ms where the one grouped statement took 100)."""
    return (f"SELECT id, {', '.join(cols)} FROM kiln_jobs WHERE id >= {mark} AND id < {mark}"
            f" ORDER BY id LIMIT {PER_STRATUM}")


def grouped(stratum: int, rows: Sequence[Sequence[object]]) -> list[tuple[object, ...]]:
    """A stratum's rows from ``stratum_sql`` as ``sample_sql`` gives them."""
    if not rows:
        return []
    top = rows[-1][0]
    jobs = Counter(tuple(r[1:]) for r in rows)
    return [(stratum, *key, n, top) for key, n in jobs.items()]


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """The table's jobs by key as a sample estimates them; ``whole``: the sample read
    every job, so they are exact."""

    jobs: dict[tuple[str, ...], float]
    whole: bool

    def estimate(self, key: tuple[str, ...]) -> int:
        """The table's jobs of ``key`` (0 if the sample saw none)."""
        return round(self.jobs.get(key, 0.0))


EMPTY = Sample({}, True)


def sample_of(lo: int | None, hi: int | None, rows: Iterable[Sequence[object]]) -> Sample:
    """The sample from ``sample_sql(lo, hi, cols)``'s rows (``lo``/``hi`` None: an empty
    table). Each stratum's jobs count for the share of the stratum read (its ids up to
    the last one read, of all its ids): strata are read to different depths (a dense
    one in part, a sparse one whole), so one share for the whole sample would weigh a
    dense stratum's jobs as a sparse one's."""
    if lo is None or hi is None:
        return EMPTY
    got = [(int(str(r[0])), tuple(str(v) for v in r[1:-2]), int(str(r[-2])), int(str(r[-1])))
           for r in rows]
    read: Counter[int] = Counter()
    last: dict[int, int] = {}
    for s, _, n, top in got:
        read[s] += n
        last[s] = max(last.get(s, top), top)
    weight: dict[int, float] = {}
    for s, (start, end) in enumerate(strata(lo, hi)):
        if read[s] >= PER_STRATUM and last[s] + 1 < end:  # read in part: its share
            weight[s] = (end - start) / (last[s] + 1 - start)
    jobs: dict[tuple[str, ...], float] = {}
    for s, key, n, _ in got:
        jobs[key] = jobs.get(key, 0.0) + n * weight.get(s, 1.0)
    return Sample(jobs, not weight)
