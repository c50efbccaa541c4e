"""Conformance: the timings read (the dashboard's per-queue and per-kind throughput and
run/wait percentiles) groups the finished jobs of a range by queue or kind, bucket,
state and duration class, on every store; the classes themselves are checked on
SQLite's SQL engine against the pure model."""

from __future__ import annotations

import sqlite3

import pytest

from kiln._model._job import AttemptError, JobResult, Outcome
from kiln._model._timings import (
    LIMITS,
    NONE,
    OVER,
    case_sql,
    percentile,
    upper,
    width_bucket_sql,
)
from kiln.stores import Store
from tests.plugins.databases import POSTGRES_URL, unavailable
from tests.stores.factories import claim, insert, job


async def test_timings_group_finished_jobs_by_queue_or_kind(store: Store) -> None:
    done = await insert(store, *(job(kind="k.a", queue="qa") for _ in range(3)))
    bad = await insert(store, *(job(kind="k.b", queue="qb", max_attempts=1) for _ in range(2)))
    await insert(store, job(kind="k.c", queue="qc"))  # never finished: not counted
    rows = {r.id: r for r in await claim(store, queue="qa", kinds=("k.a",), limit=3)}
    rows.update({r.id: r for r in await claim(store, queue="qb", kinds=("k.b",), limit=2)})
    assert set(rows) == {*done, *bad}
    await store.job_results_apply([
        JobResult(job_id=i, server_id=rows[i].server_id or "", attempt=rows[i].attempt,
                  outcome=Outcome.COMPLETED if i in done else Outcome.FAILED,
                  error=None if i in done else AttemptError(1, 0.0, "x", "", "s"))
        for i in rows])
    for by, a, b in (("queue", "qa", "qb"), ("kind", "k.a", "k.b")):
        timings = await store.job_timings(3600.0, 60.0, by)
        totals: dict[tuple[str, str], int] = {}
        for t in timings:
            totals[(t.group, t.state)] = totals.get((t.group, t.state), 0) + t.jobs
            assert t.bucket in (0, 1)  # this minute (on the clock's), or the one before
            # run and wait took well under 70 s here
            assert 0 <= t.run <= LIMITS.index(70.0) and 0 <= t.wait <= LIMITS.index(70.0)
        assert totals == {(a, "completed"): 3, (b, "failed"): 2}, by
    assert await store.job_timings(0.000001, 60.0, "queue") == []  # nothing that recent


def test_duration_classes_and_percentiles() -> None:
    conn = sqlite3.connect(":memory:")
    values = [None, -5.0, 0.0, 0.00099, 0.001, 0.25, 1.0, 59.9, 86399.9, 86400.0]
    got = [conn.execute(f"SELECT {case_sql('v')} FROM (SELECT ? AS v)", (v,)).fetchone()[0]
           for v in values]
    assert got[0] == NONE and got[1] == got[2] == got[3] == 0 and got[4] == 1
    assert got[9] == OVER
    for value, cls in zip(values[1:9], got[1:9], strict=True):
        assert value is not None
        assert value < upper(cls) and (cls == 0 or value >= upper(cls - 1)), (value, cls)
    # 90 fast jobs and 10 slow: p50 is fast, p95 and p99 slow; an empty histogram: None
    histogram = {LIMITS.index(0.01): 90, LIMITS.index(2.0): 10, NONE: 7}
    assert percentile(histogram, 0.5) == 0.01 and percentile(histogram, 0.9) == 0.01
    assert percentile(histogram, 0.95) == 2.0 and percentile(histogram, 0.99) == 2.0
    assert percentile({NONE: 3}, 0.5) is None


def test_postgres_width_bucket_gives_the_same_classes() -> None:
    """PostgreSQL's timings read uses width_bucket over LIMITS, not the CASE: the same
    class for every duration (a literal SELECT: it touches no table)."""
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(POSTGRES_URL, connect_timeout=5)
    except psycopg.OperationalError as exc:
        unavailable("postgres", str(exc))
    values = [None, -5.0, 0.0, 0.00099, 0.001, 0.0015, 0.25, 1.0, 59.9, 86399.9, 86400.0, 1e9]
    with conn:
        got = [conn.execute(f"SELECT {width_bucket_sql('%s::float8')}", (v,)).fetchone()[0]
               for v in values]
    lite = sqlite3.connect(":memory:")
    want = [lite.execute(f"SELECT {case_sql('v')} FROM (SELECT ? AS v)", (v,)).fetchone()[0]
            for v in values]
    assert got == want
