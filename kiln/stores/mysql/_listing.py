"""MySQL/MariaDB: a listing filtered by kind read as a merge of the kind's ranges of
kiln_jobs_state_kind, one a state, so that it costs what the page holds, not what the
table holds.

``SELECT ... WHERE kind = %s ORDER BY id DESC LIMIT %s`` walks the primary key from
the newest job until the page is full: quick for a kind among the newest jobs, the
whole table for one that has none there (2.0 s for a kind without jobs over 2,000,000;
bench/RESULTS.md, "list45"). Within one (state, kind) range of kiln_jobs_state_kind
(InnoDB appends the id) the ids are in order, so the page is the first ``limit`` of
the union of each state's first ``limit``: at most states x limit index entries,
sorted, then the page's rows read by id.

A state filter without a kind keeps the single statement: no index here holds a
state's ids in order (kiln_jobs_claim is in claim order), and for the few running or
failed jobs MariaDB reads the state's range and sorts it already (EXPLAIN: ref on
kiln_jobs_due, filesort).
"""

from __future__ import annotations

from typing import Any

from kiln._model._job import ALL_STATES, JobFilter
from kiln.stores._filters import FilterSql, compile_filter, keyset, ranged


def kind_page(
    f: JobFilter, sql: FilterSql, cols: str, limit: int, before_id: int | None,
    after_id: int | None,
) -> tuple[str, list[Any]] | None:
    """The statement and params of the page of ``f`` (newest first below
    ``before_id``, oldest first above ``after_id``) merged from the kind's ranges.
    None: ``f`` names no kind, or conditions only its rows can check (see
    kiln.stores._filters.ranged)."""
    if f.kind is None or not ranged(f) or limit < 0:
        return None
    cond, params = compile_filter(f, sql)
    cond, order = keyset(cond, params, before_id, after_id, sql.mark)
    states = sorted({s.value for s in f.states or ALL_STATES})
    arm = (f"(SELECT id AS listed FROM kiln_jobs FORCE INDEX (kiln_jobs_state_kind)"
           f" WHERE state = {sql.mark} AND {cond} ORDER BY id {order} LIMIT {sql.mark})")
    arms = " UNION ALL ".join([arm] * len(states))
    return (
        f"SELECT {cols} FROM (SELECT listed FROM ({arms}) AS arms ORDER BY listed {order}"
        f" LIMIT {sql.mark}) AS page JOIN kiln_jobs ON kiln_jobs.id = page.listed"
        f" ORDER BY kiln_jobs.id {order}",
        [*[v for state in states for v in (state, *params, limit)], limit],
    )
