"""Conformance: a listing filtered by states, a queue or a kind pages exactly as the
whole table filtered by hand does, newest first below a cursor and oldest first above
one, for any page size. SQLite reads these filters through its index ranges, one
(state, queue) or (state, kind) range at a time, merged (kiln.stores.sqlite._listing):
the jobs here alternate between the ranges, so a merge that lost or repeated a row, or
kept a range's order instead of the ids', gives another page."""

from __future__ import annotations

from kiln._model._job import JobFilter, JobRow, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import complete, insert, job, result

QUEUES = ("qa", "qb", "qc")
KINDS = ("ka", "kb")
AVAILABLE, SCHEDULED, RUNNING = JobState.AVAILABLE, JobState.SCHEDULED, JobState.RUNNING
COMPLETED, FAILED = JobState.COMPLETED, JobState.FAILED


async def _spread(store: Store) -> list[JobRow]:
    """36 jobs over 3 queues and 2 kinds in turn, a quarter scheduled; in qa and qb
    one completed, one failed and two running. Every job, newest first."""
    await insert(store, *[
        job(kind=KINDS[i % 2], queue=QUEUES[i % 3], args={"n": i % 5},
            delay=3600 if i % 4 == 0 else 0) for i in range(36)])
    for queue in ("qa", "qb"):
        rows = await store.job_claim(queue, list(KINDS), 4, "s1")
        await complete(store, rows[0])
        await store.job_results_apply([result(rows[1], Outcome.FAILED, error="boom")])
    return await store.job_list(JobFilter(), limit=1000)


def _matches(row: JobRow, f: JobFilter) -> bool:
    return ((not f.states or row.state in f.states)
            and f.queue in (None, row.queue) and f.kind in (None, row.kind)
            and (f.min_id is None or row.id >= f.min_id)
            and (f.max_id is None or row.id <= f.max_id)
            and all(row.args.get(k) == v for k, v in f.args.items()))


def _filters(everything: list[JobRow]) -> list[JobFilter]:
    middle = everything[len(everything) // 2].id
    return [
        JobFilter(states=(RUNNING,)), JobFilter(states=(AVAILABLE,)),
        JobFilter(states=(AVAILABLE, SCHEDULED)), JobFilter(states=(FAILED, COMPLETED, RUNNING)),
        JobFilter(states=(AVAILABLE, AVAILABLE)), JobFilter(states=(JobState.PENDING,)),
        JobFilter(kind="ka"), JobFilter(kind="none"), JobFilter(queue="qb"),
        JobFilter(queue="qc", kind="kb"), JobFilter(states=(AVAILABLE,), kind="kb"),
        JobFilter(states=(SCHEDULED, RUNNING), queue="qa"),
        JobFilter(states=(AVAILABLE, SCHEDULED), queue="qb", kind="ka"),
        JobFilter(states=(AVAILABLE,), min_id=middle), JobFilter(kind="kb", max_id=middle),
        JobFilter(states=(AVAILABLE,), args={"n": 3}),
    ]


async def _pages(
    store: Store, f: JobFilter, limit: int, newest: bool
) -> list[list[int]]:
    pages: list[list[int]] = []
    cursor: int | None = None
    while True:
        rows = await (store.job_list(f, limit, before_id=cursor, brief=True) if newest
                      else store.job_list(f, limit, after_id=cursor or 0))
        if not rows:
            return pages
        pages.append([r.id for r in rows])
        cursor = rows[-1].id


async def test_filtered_pages_are_the_table_filtered(store: Store) -> None:
    everything = await _spread(store)
    assert len(everything) == 36 and {r.state for r in everything} == {
        AVAILABLE, SCHEDULED, RUNNING, COMPLETED, FAILED}
    for f in _filters(everything):
        want = [r.id for r in everything if _matches(r, f)]
        for limit in (1, 4, 50):
            newest = await _pages(store, f, limit, newest=True)
            assert newest == [want[i:i + limit] for i in range(0, len(want), limit)], (f, limit)
            oldest = await _pages(store, f, limit, newest=False)
            mine = want[::-1]
            assert oldest == [mine[i:i + limit] for i in range(0, len(mine), limit)], (f, limit)
        assert await store.job_ids(f, 5) == want[:5], f
        if len(want) > 2:
            assert await store.job_ids(f, 100, before_id=want[1]) == want[2:], f


async def test_a_filtered_page_reads_whole_rows(store: Store) -> None:
    """The rows a merged page reads are the rows a lookup by id reads."""
    everything = await _spread(store)
    [row] = await store.job_list(JobFilter(states=(FAILED,), queue="qb"))
    assert row == (await store.job_list(JobFilter(ids=(row.id,))))[0]
    assert row.errors[-1].error == "boom"
    brief = await store.job_list(JobFilter(kind="kb"), 3, brief=True)
    assert [r.id for r in brief] == [r.id for r in everything if r.kind == "kb"][:3]
    assert all(r.args == {"n": r.args["n"]} and r.cut == {} for r in brief)
