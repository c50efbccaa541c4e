"""SQLite: the leader's periodic reads cost the jobs they return, not the backlog.

With 10,000,000 jobs waiting (none running, none awaiting), the rescuer's candidates
(every 15 s), the stranded awaiting jobs (every 60 s) and the table's size (every 60 s)
each took 0.7 to 0.9 s (bench/results/backlog-sqlite-10m-*.jsonl, "maintenance"): for
``ORDER BY id LIMIT`` SQLite walked the table in rowid order and checked each row's
state, and ``MAX(id) - MIN(id)`` in one SELECT read every row where each end alone is
one index lookup. Each test runs the old statement and the store's own on one table,
counts their VM instructions with a progress handler, and compares their rows, in
order.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from kiln.stores import Store
from kiln.stores.sqlite._cluster import AWAITING_QUEUES, RESCUE, STRANDED, stranded
from kiln.stores.sqlite._jobs import MET
from kiln.stores.sqlite._sizes import SPAN
from tests.stores.sqlite_steps import steps

OLD_RESCUE = (
    "SELECT j.* FROM kiln_jobs j LEFT JOIN kiln_servers s ON s.id = j.server_id"
    " WHERE j.state = 'running' AND (s.id IS NULL OR s.heartbeat_at < ?)"
    " AND j.attempted_at < ? ORDER BY j.id LIMIT ?"
)
OLD_STRANDED = (
    "SELECT j.id, j.queue, j.rate_key, j.run_at FROM kiln_jobs j"
    f" WHERE j.state = 'awaiting' AND {MET} ORDER BY j.id LIMIT ?"
)
OLD_SPAN = "SELECT COALESCE(MAX(id) - MIN(id) + 1, 0) FROM kiln_jobs"

BACKLOG = 60_000  # available and scheduled jobs, which none of these reads returns


def plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> list[str]:
    return [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


@contextlib.contextmanager
def backlog(backend: str, store_url: str) -> Iterator[sqlite3.Connection]:
    """The test's database with BACKLOG jobs waiting (a third of them finished ones)."""
    if backend != "sqlite":
        pytest.skip("sqlite only: its planner and partial indexes")
    path = urlsplit(store_url).path[1:]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            f"WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {BACKLOG})"
            " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at, finished_at) SELECT 'q' || (g % 7), 'k',"
            " CASE g % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'scheduled' ELSE 'completed' END,"
            " '{}', 1000 + g, 3, 0, CASE WHEN g % 3 = 2 THEN 5 END FROM s")
        yield conn


async def test_rescue_candidates_read_only_the_running_jobs(
    backend: str, store_url: str, store: Store
) -> None:
    with backlog(backend, store_url) as conn:
        conn.execute(  # one server alive, one dead
            "INSERT INTO kiln_servers (id, host, pid, queues, kinds, version, started_at,"
            " heartbeat_at) VALUES ('alive', 'h', 1, '[]', '[]', 'v', 0, 4000000000),"
            " ('dead', 'h', 2, '[]', '[]', 'v', 0, 10)")
        conn.execute(  # 120 running: on the live server, the dead one, or one swept away
            "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 120)"
            " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at, attempted_at, server_id) SELECT 'q' || (g % 7), 'k', 'running',"
            " '{}', 0, 3, 0, CASE WHEN g % 5 = 0 THEN 900 ELSE 50 END,"
            " CASE g % 3 WHEN 0 THEN 'alive' WHEN 1 THEN 'dead' ELSE 'gone' END FROM s")
        conn.execute("ANALYZE")
        params = (100.0, 100.0, 30)
        shown = plan(conn, RESCUE, params)
        new_steps, got = steps(conn, RESCUE, params)
        old_steps, want = steps(conn, OLD_RESCUE, params)
    assert "SCAN j" not in shown, shown  # the whole table, in rowid order
    assert new_steps * 10 < old_steps, (new_steps, old_steps)
    assert got == want and len(got) == 30  # the same jobs, lowest ids first
    found = await store.jobs_rescue_candidates(60.0, 500)
    assert {c.dead_server_id for c in found} == {"dead", "gone"}


async def test_stranded_jobs_read_only_the_awaiting_jobs(
    backend: str, store_url: str, store: Store
) -> None:
    with backlog(backend, store_url) as conn:
        # 600 awaiting: on a completed job (stranded), an available one (waiting
        # rightly) or a job pruned away (stranded: a missing dependency counts as met)
        conn.execute(
            "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 600)"
            " INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at) SELECT 'q' || (g % 7), 'k', 'awaiting', '{}', 0, 3, 0 FROM s")
        conn.execute(
            "INSERT INTO kiln_job_deps (job_id, dep_id) SELECT id, CASE id % 3"
            " WHEN 0 THEN (SELECT MIN(id) FROM kiln_jobs WHERE state = 'completed')"
            " WHEN 1 THEN (SELECT MIN(id) FROM kiln_jobs WHERE state = 'available')"
            " ELSE -1 END FROM kiln_jobs WHERE state = 'awaiting'")
        conn.execute("ANALYZE")
        shown = plan(conn, AWAITING_QUEUES) + plan(conn, STRANDED, ("q1", 100))
        new_steps, got = steps(conn, lambda: stranded(conn, 100))
        old_steps, want = steps(conn, OLD_STRANDED, (100,))
        all_new = steps(conn, lambda: stranded(conn, 1000))[1]
        all_old = steps(conn, OLD_STRANDED, (1000,))[1]
        # each queue's walk stops at its limit: 10 of 400 stranded read far fewer
        few_steps, few = steps(conn, lambda: stranded(conn, 10))
    assert not [d for d in shown if d.startswith(("SCAN j", "SCAN kiln_jobs"))], shown
    assert new_steps * 5 < old_steps, (new_steps, old_steps)
    assert got == want and len(got) == 100  # the same jobs, lowest ids first
    assert all_new == all_old and len(all_new) == 400
    assert few == want[:10] and few_steps * 4 < new_steps, (few_steps, new_steps)
    assert sum((await store.jobs_release_stranded(1000)).values()) == 400


async def test_the_size_reads_each_end_of_the_ids(
    backend: str, store_url: str, store: Store
) -> None:
    with backlog(backend, store_url) as conn:
        conn.execute("DELETE FROM kiln_jobs WHERE id < 100")
        conn.execute("ANALYZE")
        new_steps, got = steps(conn, SPAN)
        old_steps, want = steps(conn, OLD_SPAN)
        conn.execute("DELETE FROM kiln_jobs")
        empty = steps(conn, SPAN)[1], steps(conn, OLD_SPAN)[1]
    assert new_steps * 100 < old_steps, (new_steps, old_steps)
    assert got == want == [(BACKLOG - 99,)]
    assert empty == ([(0,)], [(0,)])
    assert [s.rows for s in await store.table_sizes()] == [0]
