"""SQLite: a listing filtered by states, a queue or a kind reads what its page holds,
not the table (kiln.stores.sqlite._listing).

``SELECT ... WHERE state IN (?) ORDER BY id DESC LIMIT ?`` ran as ``SCAN kiln_jobs``
(the statistics say a state matches half the table), so the Servers page's running
jobs under a backlog read every row: 742 ms a request at 10,000,000 jobs waiting
(bench/RESULTS.md, "list45"). The merged ranges run a small, flat number of VM
instructions (counted by a progress handler) where the old statement's grow with the
table, and both give the same rows.
"""

from __future__ import annotations

import contextlib
import sqlite3
from urllib.parse import urlsplit

import pytest

from kiln._model._job import JobFilter, JobState, NewJob
from kiln.stores import Store
from kiln.stores._filters import page
from kiln.stores.sqlite import _listing
from kiln.stores.sqlite._admin import BRIEF_COLS, FILTER_SQL, _listed
from kiln.stores.sqlite._store import connect

RUNNING = JobFilter(states=(JobState.RUNNING,))
READS = {  # (filter, limit): the Servers page's read, the Jobs page's tabs
    "running": (RUNNING, 500),
    "failed": (JobFilter(states=(JobState.FAILED,)), 51),
    "kind": (JobFilter(kind="k42"), 51),
    "available": (JobFilter(states=(JobState.AVAILABLE,)), 51),
}


def _fill(conn: sqlite3.Connection, rows: int) -> None:
    """``rows`` jobs over 20 queues and 100 kinds: the older half available, the newer
    half scheduled, 5 running among the first 25,000 ids, none failed."""
    conn.execute(
        "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?)"
        " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
        " created_at) SELECT 'q' || (g % 20), 'k' || (g % 100),"
        " CASE WHEN g % 5000 = 7 AND g < 25000 THEN 'running' WHEN g * 2 <= ? THEN 'available'"
        " ELSE 'scheduled' END, '{}', 1000, 3, 0 FROM s", (rows, rows))
    conn.execute("ANALYZE")


def _steps(conn: sqlite3.Connection, read: str) -> tuple[int, int, list[int]]:
    """Hundreds of VM instructions the old statement and the store's listing ran, and
    the page's ids (the same by both, or the assertion says which)."""
    f, limit = READS[read]
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return 0

    sql, params = page(f, FILTER_SQL, BRIEF_COLS, None, None)
    conn.set_progress_handler(tick, 100)
    try:
        want = [int(r[0]) for r in conn.execute(sql, [*params, limit])]
        old, count = count, 0
        got = [int(r["id"]) for r in _listed(conn, f, limit, None, None, BRIEF_COLS)]
    finally:
        conn.set_progress_handler(None, 0)
    assert got == want, read
    return old, count, got


async def test_a_state_listing_reads_its_page_not_the_table(
    backend: str, store_url: str, store: Store
) -> None:
    if backend != "sqlite":
        pytest.skip("sqlite only: its planner's choice and VM counts")
    path = urlsplit(store_url).path[1:]
    costs: dict[str, list[tuple[int, int]]] = {read: [] for read in READS}
    for rows in (25_000, 100_000):
        with contextlib.closing(connect(path)) as conn:
            conn.execute("DELETE FROM kiln_jobs")
            _fill(conn, rows)
            sql, params = page(RUNNING, FILTER_SQL, "id", None, None)
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, [*params, 1])]
            assert plan == ["SCAN kiln_jobs"]  # the old statement: every row, newest first
            for read in READS:
                old, new, ids = _steps(conn, read)
                costs[read].append((old, new))
                assert len(ids) == (5 if read == "running" else 0 if
                                    read == "failed" else 51), (read, ids)
    for read, ((old_small, new_small), (old_big, new_big)) in costs.items():
        # the old read grows with the table (fourfold); the merged one does not (100 k
        # rows: old 3,000 running, 3,000 failed, 560 kind, 1,500 available; new 2, 1,
        # 30, 31)
        assert new_big < 100 and new_big <= new_small + 5, (read, costs[read])
        assert old_big > 3 * old_small, (read, costs[read])
        assert new_big * 10 < old_big, (read, costs[read])
    running = await store.job_list(RUNNING, 500, brief=True)
    assert len(running) == 5 and running[0].id > running[-1].id


async def test_too_many_ranges_fall_back_to_the_kinds_then_the_statement(
    backend: str, store_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More queues under the states than MAX_RANGES: the kinds' ranges; more of both:
    the single statement. Each gives the same page."""
    if backend != "sqlite":
        pytest.skip("sqlite only: its index ranges")
    monkeypatch.setattr(_listing, "MAX_RANGES", 2)
    await store.job_insert_many([NewJob(kind=f"k{i % 2}", args={}, queue=f"q{i % 3}",
                                        delay=3600 if i % 4 == 0 else 0) for i in range(24)])
    everything = await store.job_list(JobFilter(), 100)
    with contextlib.closing(connect(urlsplit(store_url).path[1:])) as conn:
        one = JobFilter(states=(JobState.AVAILABLE,))
        two = JobFilter(states=(JobState.AVAILABLE, JobState.SCHEDULED))
        assert {r[0] for r in _listing._ranges(conn, one) or []} == {"kind"}
        assert _listing._ranges(conn, two) is None
    for f in (one, two):
        want = [r.id for r in everything if r.state in f.states]
        assert [r.id for r in await store.job_list(f, 100)] == want
        assert [r.id for r in await store.job_list(f, 5, before_id=want[3])] == want[4:9]
