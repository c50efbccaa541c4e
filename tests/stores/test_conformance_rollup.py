"""Conformance: the timings rollup (kiln._model._rollup) on every store.

The charts read from the rollup what a direct count of the jobs gives; a roll cut
short between its rows and its watermark leaves neither; two rollers (a leader lease
handed over) count no window twice; the pruner deletes no finished job the rollup has
not counted; and an older kiln that neither rolls nor bounds its pruning, beside a
newer one, makes the charts neither count a job twice nor lose one still in the table.
The database clock moves by ``clock.advance`` (tests/stores/clock.py), not by sleeps.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from urllib.parse import urlsplit

import pytest

from kiln import StoreError
from kiln._model._job import AttemptError, JobFilter, JobResult, JobRow, JobState, Outcome
from kiln._model._timings import LIMITS, NONE, TimingRow
from kiln.stores import Store
from tests.stores.clock import Clock, clockable_url
from tests.stores.factories import claim, insert, job, roll_all, sql_exec

Key = tuple[str, int, str, int, int]


@pytest.fixture
def store_url(store_url: str) -> str:
    return clockable_url(store_url)


def _cls(seconds: float | None) -> int:
    """The duration class kiln._model._timings documents, computed here in Python."""
    return NONE if seconds is None else bisect.bisect_right(LIMITS, seconds)


def _direct(rows: list[JobRow], by: str, bucket: float) -> Counter[Key]:
    """(group, slot, state, run class, wait class) -> jobs, from the job rows."""
    out: Counter[Key] = Counter()
    for r in rows:
        if r.state not in (JobState.COMPLETED, JobState.FAILED) or r.finished_at is None:
            continue
        assert r.attempted_at is not None
        run = (r.finished_at - r.attempted_at).total_seconds()
        wait = (r.attempted_at - r.run_at).total_seconds()
        group = r.queue if by == "queue" else r.kind
        slot = int(r.finished_at.timestamp() // bucket)
        out[(group, slot, r.state.value, _cls(run), _cls(wait))] += 1
    return out


def _read(timings: list[TimingRow]) -> Counter[Key]:
    """The same key with the read's bucket (0: the current one) in place of the slot."""
    out: Counter[Key] = Counter()
    for t in timings:
        out[(t.group, t.bucket, t.state, t.run, t.wait)] += t.jobs
    return out


def _same(direct: Counter[Key], read: Counter[Key]) -> bool:
    """Equal once the read's buckets are turned into slots (slot = current - bucket)."""
    if not direct:
        return not read
    for current in {k[1] + b[1] for k in direct for b in read}:
        moved = Counter({(g, current - b, s, r, w): n for (g, b, s, r, w), n in read.items()})
        if moved == +direct:
            return True
    return False


async def _finish(store: Store, clock: Clock, queue: str, kind: str, n: int, wait: float,
                  run: float, failed: int = 0) -> list[int]:
    ids = await insert(store, *(job(kind=kind, queue=queue, max_attempts=1) for _ in range(n)))
    await clock.advance(wait)
    rows = await claim(store, limit=n, queue=queue, kinds=(kind,))
    assert sorted(r.id for r in rows) == sorted(ids)
    await clock.advance(run)
    results = await store.job_results_apply([
        JobResult(job_id=r.id, server_id=r.server_id or "s1", attempt=r.attempt,
                  outcome=Outcome.FAILED if i < failed else Outcome.COMPLETED,
                  error=AttemptError(1, 0.0, "boom") if i < failed else None,
                  claimed_at=r.attempted_at)
        for i, r in enumerate(rows)])
    assert results.applied == n
    return ids


async def _jobs(store: Store) -> list[JobRow]:
    return await store.job_list(JobFilter(), limit=1000)


async def _some_finished(store: Store, clock: Clock) -> None:
    """Jobs of two queues and kinds, in different minutes and duration classes."""
    await _finish(store, clock, "qa", "k.a", 4, wait=2.0, run=40.0, failed=1)
    await clock.advance(130)
    # each duration a clock step plus the test's own few ms: none within a microsecond
    # of a class limit, where the store's arithmetic and Python's may round apart
    await _finish(store, clock, "qb", "k.b", 3, wait=0.4, run=0.2)
    await _finish(store, clock, "qb", "k.c", 2, wait=7.5, run=0.4, failed=2)


RANGES = ((3600.0, 60.0), (6 * 3600.0, 300.0), (86400.0, 900.0), (7 * 86400.0, 7200.0))


async def test_the_rollup_reads_what_a_direct_count_of_the_jobs_gives(
        store: Store, store_url: str, clock: Clock) -> None:
    await _some_finished(store, clock)
    await clock.advance(90)
    for since, bucket in RANGES:  # never rolled: every job is in the tail
        for by in ("queue", "kind"):
            direct = _direct(await _jobs(store), by, bucket)
            assert sum(direct.values()) == 9
            assert _same(direct, _read(await store.job_timings(since, bucket, by))), (bucket, by)
    assert await roll_all(store, clock) == 9
    assert await store.timings_rolled_to() is not None
    rolled = sql_exec(store_url, "SELECT width, SUM(jobs) FROM kiln_timings GROUP BY width")
    assert {int(w): int(n) for w, n in rolled} == {60: 9, 900: 9}
    await _finish(store, clock, "qa", "k.a", 2, wait=0.0, run=1.0)  # the tail after it
    for since, bucket in RANGES:
        for by in ("queue", "kind"):
            direct = _direct(await _jobs(store), by, bucket)
            assert sum(direct.values()) == 11
            assert _same(direct, _read(await store.job_timings(since, bucket, by))), (bucket, by)
    assert await roll_all(store, clock) == 2  # counted once: the watermark moved past them
    assert await roll_all(store, clock) == 0


def _triggers(store_url: str, create: bool) -> None:
    """A trigger that fails the watermark's update: a roll 'crashes' after its rows."""
    scheme = urlsplit(store_url).scheme
    if scheme.startswith("postgres"):
        statements = [
            "CREATE FUNCTION kiln_test_crash() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'crash before the watermark'; END $$",
            "CREATE TRIGGER kiln_test_crash BEFORE UPDATE ON kiln_timings_mark"
            " FOR EACH ROW EXECUTE FUNCTION kiln_test_crash()",
        ] if create else ["DROP TRIGGER kiln_test_crash ON kiln_timings_mark"]
    elif scheme == "sqlite":
        statements = [
            "CREATE TRIGGER kiln_test_crash BEFORE UPDATE ON kiln_timings_mark"
            " BEGIN SELECT RAISE(ABORT, 'crash before the watermark'); END"
        ] if create else ["DROP TRIGGER kiln_test_crash"]
    else:
        statements = [
            "CREATE TRIGGER kiln_test_crash BEFORE UPDATE ON kiln_timings_mark"
            " FOR EACH ROW SIGNAL SQLSTATE '45000'"
            " SET MESSAGE_TEXT = 'crash before the watermark'"
        ] if create else ["DROP TRIGGER kiln_test_crash"]
    for sql in statements:
        sql_exec(store_url, sql)


async def test_a_roll_cut_short_before_its_watermark_leaves_no_rows(
        store: Store, store_url: str, clock: Clock) -> None:
    await _some_finished(store, clock)
    await clock.advance(120)
    _triggers(store_url, create=True)
    try:
        with pytest.raises(StoreError):
            await store.timings_roll()
        assert await store.timings_rolled_to() is None
        assert sql_exec(store_url, "SELECT COUNT(*) FROM kiln_timings")[0][0] == 0
    finally:
        _triggers(store_url, create=False)
    assert await roll_all(store, clock) == 9  # the next roll counts each job once
    assert int(sql_exec(store_url, "SELECT SUM(jobs) FROM kiln_timings WHERE width = 60"
                        )[0][0]) == 9


async def test_two_rollers_at_once_count_each_window_once(
        store: Store, other_store: Store, store_url: str, clock: Clock) -> None:
    clock.add(other_store)
    await _some_finished(store, clock)
    await clock.advance(120)
    counted = 0
    for _ in range(50):
        (a, done_a), (b, done_b) = await asyncio.gather(
            store.timings_roll(), other_store.timings_roll())
        counted += a + b
        if done_a and done_b:
            break
    assert counted == 9
    assert int(sql_exec(store_url, "SELECT SUM(jobs) FROM kiln_timings WHERE width = 900"
                        )[0][0]) == 9


async def test_the_pruner_deletes_no_job_the_rollup_has_not_counted(
        store: Store, clock: Clock) -> None:
    await _some_finished(store, clock)
    await clock.advance(3600)
    # never rolled: nothing younger than the rollup's start (7 days and more) goes
    assert await store.jobs_prune(JobState.COMPLETED, 1.0, 100) == 0
    assert await store.jobs_prune(JobState.FAILED, 1.0, 100) == 0
    assert await roll_all(store, clock) == 9
    [late] = await _finish(store, clock, "qa", "k.a", 1, wait=0.0, run=0.0)
    await clock.advance(5)  # older than the retention, newer than the watermark
    assert await store.jobs_prune(JobState.COMPLETED, 1.0, 100) == 6
    assert await store.jobs_prune(JobState.FAILED, 1.0, 100) == 3
    assert [r.id for r in await _jobs(store)] == [late]
    # what was pruned stays in the charts; the late job too, from the tail
    totals = sum(t.jobs for t in await store.job_timings(86400.0, 900.0, "queue"))
    assert totals == 10
    assert await roll_all(store, clock) == 1
    assert await store.jobs_prune(JobState.COMPLETED, 1.0, 100) == 1


async def test_an_older_kiln_beside_a_newer_one_counts_no_job_twice_and_loses_none(
        store: Store, other_store: Store, store_url: str, clock: Clock) -> None:
    """The older kiln (``other_store`` standing for its server: it finishes jobs, never
    rolls, and prunes without the bound) holds the leader lease, then the newer one."""
    clock.add(other_store)
    await _finish(store, clock, "qa", "k.a", 3, wait=0.0, run=1.0)
    await clock.advance(120)
    assert await roll_all(store, clock) == 3  # the newer kiln led first
    # the older kiln leads: it finishes jobs and rolls nothing; the charts read them
    # from the tail, the rolled ones from the rollup
    await _finish(other_store, clock, "qb", "k.b", 4, wait=0.0, run=0.5)
    await clock.advance(200)

    async def total() -> int:
        return sum(t.jobs for t in await store.job_timings(86400.0, 900.0, "queue"))

    assert await total() == 7
    # its pruner deletes every finished job past the retention, counted or not
    for r in await _jobs(store):
        sql_exec(store_url, "DELETE FROM kiln_jobs WHERE id = %s", (r.id,))
    assert await total() == 3  # the uncounted ones are gone, as from every older chart
    await _finish(other_store, clock, "qb", "k.b", 2, wait=0.0, run=0.5)
    assert await total() == 5
    # the newer kiln leads again: it counts what is left after its watermark, once
    assert await roll_all(store, clock) == 2
    assert await total() == 5
    assert await roll_all(store, clock) == 0
    assert await total() == 5


async def test_a_watermark_read_before_a_roll_counts_no_job_twice(
        store: Store, store_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read takes the watermark, then the rows: a roll may commit in between. The read
    then adds the quarter rows of whole quarters before the watermark it saw, minute
    rows up to it and the jobs from it on, which no later roll changes. SQLite only: the
    read's parts are kiln._model._rollup.read_bounds on every store, and SQLite's read
    takes its watermark through a function this test can hold back."""
    if urlsplit(store_url).scheme != "sqlite":
        pytest.skip("the stale watermark is held back through SQLite's module")
    from kiln.stores.sqlite import _rollup as sqlite_rollup

    [probe] = await insert(store, job(kind="probe", queue="probe"))
    row = await store.job_get(probe)
    assert row is not None
    into = row.created_at.timestamp() % 900  # seconds into the clock's quarter hour
    if into < 120 or into > 700:  # finish well inside a quarter, past its first minutes
        await clock.advance((900 - into) % 900 + 300)
    [done] = await _finish(store, clock, "qa", "k.a", 1, wait=0.0, run=0.0)
    finished = (await store.job_get(done)).finished_at  # type: ignore[union-attr]
    assert finished is not None
    seen = int(finished.timestamp() // 60) * 60  # the watermark before the job's roll
    assert seen % 900 != 0
    assert await roll_all(store, clock) == 1  # the roll the read did not see
    monkeypatch.setattr(sqlite_rollup, "rolled_to", lambda conn: seen)
    for since, bucket in RANGES:
        total = sum(t.jobs for t in await store.job_timings(since, bucket, "queue"))
        assert total == 1, (bucket, total)
