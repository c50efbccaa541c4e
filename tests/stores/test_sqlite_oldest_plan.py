"""SQLite: each queue's oldest available job (the leader's and kilnotel's
``queue_oldest_available``, every 15 s) read through the claim indexes, not the table;
and each queue's due scheduled jobs through the due end of kiln_jobs_scheduled.

``WHERE state = 'available'`` matched neither partial index (kiln_jobs_claim is
``state = 'available' AND conc_key IS NULL``), so the old statement read every
available job's row through kiln_jobs_state_queue: 8.5 s with 5,000,000 jobs waiting
(bench/RESULTS.md, "scale45"). The new one never scans kiln_jobs, runs a small
fraction of the old one's VM instructions (counted by a progress handler), and both
give the same ages.
"""

from __future__ import annotations

import contextlib
import sqlite3
from urllib.parse import urlsplit

import pytest

from kiln.stores import Store
from kiln.stores.sqlite._admin import OLDEST, SCHEDULED_DUE
from tests.stores.sqlite_steps import steps

OLD = "SELECT queue, MIN(run_at) FROM kiln_jobs WHERE state = 'available' GROUP BY queue"
OLD_DUE = ("SELECT queue, COUNT(*) FROM kiln_jobs WHERE state = 'scheduled' AND run_at <= ?"
           " GROUP BY queue")


async def test_the_oldest_ages_read_the_claim_indexes(
    backend: str, store_url: str, store: Store
) -> None:
    if backend != "sqlite":
        pytest.skip("sqlite only: its partial indexes")
    path = urlsplit(store_url).path[1:]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 30000)"
            " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at, priority, conc_key) SELECT 'q' || (g % 7), 'k',"
            " CASE g % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'scheduled' ELSE 'completed' END,"
            " '{}', 1000 + (g * 7919) % 30011, 3, 0, g % 3,"
            " CASE WHEN g % 10 = 0 THEN 'c' || (g % 4) END FROM s")
        conn.execute("ANALYZE")
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + OLDEST)]
        (new_steps, got), (old_steps, want) = steps(conn, OLDEST), steps(conn, OLD)
    assert not [d for d in plan if d.startswith("SCAN kiln_jobs")], plan
    assert not [d for d in plan if "kiln_jobs_state_queue" in d], plan  # every available
    # the old read visits the 10,000 available rows; the new 21 (queue, priority)
    # ranges' first entries plus the 1,000 limited jobs' index entries
    assert new_steps * 5 < old_steps, (new_steps, old_steps)
    assert sorted(got) == sorted(want) and len(got) == 7
    ages = await store.queue_oldest_available()
    assert sorted(ages) == [f"q{n}" for n in range(7)]


async def test_the_due_counts_read_only_the_due_jobs(
    backend: str, store_url: str, store: Store
) -> None:
    """queue_scheduled_due (every 15 s): SQLite walked every scheduled job through
    kiln_jobs_state_queue for its GROUP BY order (5.7 s at 2,500,000 scheduled)."""
    if backend != "sqlite":
        pytest.skip("sqlite only: its partial indexes")
    path = urlsplit(store_url).path[1:]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(  # 20,000 scheduled, 70 of them due (run_at 1,000 to 1,069)
            "WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < 19999)"
            " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at) SELECT 'q' || (g % 7), 'k', 'scheduled', '{}',"
            " CASE WHEN g < 70 THEN 1000 + g ELSE 4000000000 + g END, 3, 0 FROM s")
        conn.execute("ANALYZE")
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + SCHEDULED_DUE, (2000,))]
        (new_steps, got), (old_steps, want) = (steps(conn, SCHEDULED_DUE, (2000,)),
                                               steps(conn, OLD_DUE, (2000,)))
    assert [d for d in plan if "kiln_jobs_scheduled" in d], plan
    assert new_steps * 20 < old_steps, (new_steps, old_steps)
    assert sorted(got) == sorted(want) == [(f"q{n}", 10) for n in range(7)]
    assert await store.queue_scheduled_due() == {f"q{n}": 10 for n in range(7)}
