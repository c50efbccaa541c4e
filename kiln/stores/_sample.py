"""A bounded sample of the jobs, for the estimates of the stores without TABLESAMPLE
(MariaDB, SQLite): what their capped counts (kiln.stores._capped) report above the cap.

The ids from the lowest to the highest are cut into strata on a grid whose stride is a
power of two (so the strata stay put while jobs come and go, and move only when the
span of ids doubles or halves): between STRATA / 2 and STRATA + 1 of them. Each stratum
gives its highest id (one primary-key descent) and its first PER_STRATUM jobs (a
primary-key range). A stratum that held no more was read whole: its jobs count once
each. One that held more is estimated from the density of what was read: the jobs
read span the ids ``first`` to ``last``, the stratum's jobs lie between ``first`` and
its highest id ``top``, so each job read stands for ``(top - first + 1) / (last -
first + 1)`` jobs. Gaps in the ids (pruned or deleted jobs, ids a MariaDB bulk insert
reserved and never used) at a stratum's head or tail bias nothing; only a gap inside a
stratum's unread part, narrower than the stratum, does (the strata are kept narrow
for that: a third of a bulk insert's gaps are wider). A sample reads at most
(STRATA + 1) x PER_STRATUM rows (about 16,400) and twice as many descents as strata,
whatever the table holds, and a table of fewer rows is read whole: exact.

The same stratified read as PostgreSQL's ``TABLESAMPLE SYSTEM``, by ids instead of
pages: jobs enqueued together (one queue's batch) sit together, so a stratum's rows
are alike, and the sample's spread is that of a cluster sample (measured against exact
counts in bench/RESULTS.md, "counts45"; ADR 0020).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

STRATA = 512  # at most STRATA + 1 strata over the ids (at least STRATA / 2 once big)
PER_STRATUM = 32  # jobs read from the start of each stratum, at most

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


def _reads(cols: Sequence[str], a: str, b: str) -> tuple[str, str]:
    """A stratum's two reads from ``a`` to ``b`` (exclusive): its first jobs, rows
    ``(id, *cols)``, and its highest id."""
    where = f"FROM kiln_jobs WHERE id >= {a} AND id < {b}"
    return (f"id, {', '.join(cols)} {where} ORDER BY id LIMIT {PER_STRATUM}", f"MAX(id) {where}")


def stratum_sql(cols: Sequence[str]) -> tuple[str, str]:
    """One stratum's reads, its bounds two ``?`` parameters each (SQLite, in process,
    reads the strata one statement each: 196 reads in a loop took 26 ms where one
    statement of them all, grouped, took 100)."""
    jobs, top = _reads(cols, "?", "?")
    return f"SELECT {jobs}", f"SELECT {top}"


def sample_sql(lo: int, hi: int, cols: Sequence[str]) -> tuple[str, str]:
    """Two statements reading every stratum at once (MariaDB: one round trip): rows
    ``(stratum, id, *cols)``, and rows ``(stratum, highest id)``. The bounds are this
    module's integers, written into the statements; each term is parenthesised, as
    MariaDB wants a UNION term's ORDER BY ... LIMIT."""
    terms = [(i, _reads(cols, str(a), str(b))) for i, (a, b) in enumerate(strata(lo, hi))]
    return (" UNION ALL ".join(f"(SELECT {i} AS s, {jobs})" for i, (jobs, _) in terms),
            " UNION ALL ".join(f"(SELECT {i} AS s, {top})" for i, (_, top) in terms))


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


def sample_of(rows: Iterable[Sequence[object]], tops: Mapping[int, int | None]) -> Sample:
    """The sample from the strata's rows ``(stratum, id, *cols)`` and highest ids (None
    or absent: an empty stratum)."""
    read: dict[int, list[Sequence[object]]] = {}
    for row in rows:
        read.setdefault(int(str(row[0])), []).append(row)
    jobs: dict[tuple[str, ...], float] = {}
    whole = True
    for s, got in read.items():
        weight = 1.0
        top = tops.get(s)
        ids = [int(str(r[1])) for r in got]
        first, last = min(ids), max(ids)
        if len(got) >= PER_STRATUM and top is not None and int(top) > last:  # read in part
            weight, whole = (int(top) - first + 1) / (last - first + 1), False
        for r in got:
            key = tuple(str(v) for v in r[2:])
            jobs[key] = jobs.get(key, 0.0) + weight
    return Sample(jobs, whole)
