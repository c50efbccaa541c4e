"""Conformance: the dashboard's counts of finished jobs (``job_throughput``,
``job_finished_series``, ``queue_completed_series``) read the timings rollup's minute
rows before its watermark and the jobs for the rest (kiln._model._rollup
.finished_bounds), on every store: they give what a direct count of the jobs gives,
for spans that start inside a minute, on one and before the watermark, with cancelled
jobs (which the rollup does not count) and a tail after the watermark; and the jobs
the rollup counted are not read again (deleted from the table, as the pruner may,
they still count). The database clock moves by ``clock.advance``, not by sleeps.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kiln._model._job import JobFilter, JobRow, JobState
from kiln.stores import Store
from tests.stores.clock import Clock, clockable_url
from tests.stores.factories import insert, job, roll_all, sql_exec
from tests.stores.test_conformance_rollup import _finish, _jobs

FINISHED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


@pytest.fixture
def store_url(store_url: str) -> str:
    return clockable_url(store_url)


def _throughput(rows: list[JobRow], start: float) -> dict[str, int]:
    out: Counter[str] = Counter()
    for r in rows:
        if r.state in FINISHED and r.finished_at and r.finished_at.timestamp() >= start:
            out[r.state.value] += 1
    return dict(out)


def _series(rows: list[JobRow], now: float, since: float, bucket: float, queue: bool
            ) -> Counter[tuple[str, int]]:
    """(state or queue, bucket) -> jobs: buckets on the epoch's multiples of ``bucket``,
    0 the current one, ``since // bucket`` of them."""
    current, out = int(now // bucket), Counter[tuple[str, int]]()
    for r in rows:
        if r.state not in FINISHED or r.finished_at is None:
            continue
        if queue and r.state is not JobState.COMPLETED:
            continue
        b = current - int(r.finished_at.timestamp() // bucket)
        if b < int(since // bucket):
            out[(r.queue if queue else r.state.value, b)] += 1
    return out


async def _cancelled(store: Store, clock: Clock, n: int) -> None:
    await insert(store, *(job(queue="qc", kind="k.c") for _ in range(n)))
    await clock.advance(5.0)
    assert await store.jobs_cancel(JobFilter(queue="qc", states=(JobState.AVAILABLE,))) == n


async def _check(store: Store, rows: list[JobRow]) -> None:
    """Every read against the direct count of ``rows``, for spans that start 2 s
    before and after each finish (inside a minute) and on whole minutes."""
    now = (await store.now()).timestamp()
    finishes = sorted(r.finished_at.timestamp() for r in rows if r.finished_at)
    starts = {s for f in finishes for s in (f - 2.0, f + 2.0)}
    starts |= {float(int(f // 60) * 60) for f in finishes}
    for start in sorted(starts):
        now = (await store.now()).timestamp()
        got = await store.job_throughput(now - start)
        assert got == _throughput(rows, start), (now - start, got)
    for since, bucket in ((3600.0, 60.0), (6 * 3600.0, 300.0), (900.0, 60.0)):
        now = (await store.now()).timestamp()
        series = Counter({(s, b): n for b, s, n in
                          await store.job_finished_series(since, bucket)})
        assert series == _series(rows, now, since, bucket, False), (since, bucket)
        by_queue = Counter({(q, b): n for q, b, n in
                            await store.queue_completed_series(since, bucket)})
        assert by_queue == _series(rows, now, since, bucket, True), (since, bucket)


async def test_finished_counts_read_the_rollup_and_give_a_direct_count(
        store: Store, store_url: str, clock: Clock) -> None:
    await _finish(store, clock, "qa", "k.a", 4, wait=2.0, run=40.0, failed=1)
    await _cancelled(store, clock, 2)
    await clock.advance(130)
    await _finish(store, clock, "qb", "k.b", 3, wait=0.4, run=0.2)
    await _finish(store, clock, "qb", "k.c", 2, wait=7.5, run=0.4, failed=2)
    await clock.advance(75)
    await _cancelled(store, clock, 1)
    await _check(store, await _jobs(store))  # never rolled: every job read directly
    assert await roll_all(store, clock) == 9
    await _finish(store, clock, "qa", "k.a", 2, wait=0.0, run=1.0)  # the tail
    await _cancelled(store, clock, 1)
    rows = await _jobs(store)
    assert sum(1 for r in rows if r.state in FINISHED) == 15
    await _check(store, rows)
    # the rolled jobs leave the table (as the pruner deletes them): a span that starts
    # before the minute of the first still counts them, from the rollup's minute rows
    # (the head, up to the first whole minute, is read from the jobs)
    rolled_to = await store.timings_rolled_to()
    assert rolled_to is not None
    first = min(r.finished_at.timestamp() for r in rows if r.finished_at)
    start = float(int(first // 60) * 60) - 1.0
    before = _throughput(rows, start)
    counted = [r.id for r in rows if r.state in (JobState.COMPLETED, JobState.FAILED)
               and r.finished_at and r.finished_at.timestamp() < rolled_to]
    assert len(counted) == 9
    for job_id in counted:
        sql_exec(store_url, "DELETE FROM kiln_jobs WHERE id = %s", (job_id,))
    now = (await store.now()).timestamp()
    assert await store.job_throughput(now - start) == before
    series = Counter({(s, b): n for b, s, n in await store.job_finished_series(3600.0, 60.0)})
    assert series == _series(rows, now, 3600.0, 60.0, False)
