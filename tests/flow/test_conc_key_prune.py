"""Concurrency key rows no job needs are pruned, and the limited claim costs what it cost
before 100,000 tenants came and went (issue 40 build item 3, its Done-when), on every
store.

``Concurrency(max=1, key="args.tenant")`` leaves a row in kiln_concurrency_keys per
tenant, and every limited claim probes every row for an available job: before this, an
empty limited claim on PostgreSQL took 2.5 ms with no old keys and 1.5 s after 100,000.
The leader's pruner deletes the rows that no job needs (none waiting, running or still
ending) once no claim took a job of them for ``key_idle``. Measured as the database's own
count of work, not as time (a loaded machine): key rows read and index probes of its
plan (PostgreSQL), handler reads (MariaDB), virtual machine steps (SQLite), one empty
limited claim, rolled back.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any
from urllib.parse import urlsplit

import psycopg

from kiln import NewJob, ServerConfig
from kiln._events import EventHub  # kiln.events.EventHub once the naming change is in
from kiln._model._concurrency import Concurrency, stamp
from kiln._model._job import JobFilter
from kiln._server._context import ServerContext
from kiln._server._identity import Identity
from kiln._server.maintenance.pruner import Pruner
from kiln.stores import Store
from kiln.stores.mysql import _concurrency as mysql_conc
from kiln.stores.postgres import _concurrency as pg_conc
from kiln.stores.sqlite import _concurrency as sqlite_conc
from tests.plugins.databases import mysql_connect
from tests.stores.factories import complete
from tests.support.mysql_plan import run_plan

TENANTS = 100_000
ENQUEUED = 2_000  # of them, through the store
LIMIT = Concurrency(max=1, key="args.tenant")
CLAIM = ("q", ["sync"], 10, "probe")  # queue, kinds, limit, server


def _job(tenant: str, **options: Any) -> NewJob:
    job = NewJob(kind="sync", args={"tenant": tenant}, queue="q", **options)
    stamp(job, LIMIT)
    return job


def _keys_and_probes(node: dict[str, Any]) -> int:
    """What a claim's plan did that grows with the key rows: the rows it read of
    kiln_concurrency_keys, and the runs of its reads of kiln_jobs (one probe each).
    Not buffers: the pages of deleted rows stay in the table (read by a sequential
    scan, cheaply: no row) until VACUUM truncates it, which on this shared server
    another session's open transaction can hold back for the whole test."""
    loops = int(node.get("Actual Loops", 0))
    own = {"kiln_concurrency_keys": loops * int(node.get("Actual Rows", 0)),
           "kiln_jobs": loops}.get(str(node.get("Relation Name")), 0)
    return own + sum(_keys_and_probes(c) for c in node.get("Plans", ()))


def claim_work(url: str) -> int:
    """The work of one limited claim of CLAIM, in the store's own unit (rolled back)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        with contextlib.closing(sqlite3.connect(parts.path, isolation_level=None)) as conn:
            conn.row_factory = sqlite3.Row
            conn.execute("BEGIN IMMEDIATE")
            conn.set_progress_handler(count, 10)
            sqlite_conc.claim(conn, *CLAIM)
            conn.set_progress_handler(None, 0)
            conn.execute("ROLLBACK")
        return steps[0]
    if parts.scheme.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("ANALYZE kiln_concurrency_keys")
            queue, kinds, limit, server = CLAIM
            params = {"qkey": f"queue:{queue}", "q": queue, "kinds": kinds, "limit": limit,
                      "server": server}
            with pg.transaction(force_rollback=True):
                row = pg.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                                 + pg_conc.CLAIM_LIMITED, params).fetchone()
        assert row is not None
        plan = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
        return _keys_and_probes(plan)
    my = mysql_connect(url)
    with contextlib.closing(my), my.cursor() as cur:
        cur.execute("FLUSH STATUS")
        cur.execute("BEGIN")
        run_plan(cur, mysql_conc.claim(*CLAIM))
        cur.execute("ROLLBACK")
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
        return sum(int(v) for _, v in cur.fetchall())


def _key_rows(url: str) -> set[str]:
    parts = urlsplit(url)
    sql = "SELECT conc_key FROM kiln_concurrency_keys"
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path)) as conn:
            return {r[0] for r in conn.execute(sql)}
    if parts.scheme.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as pg:
            return {r[0] for r in pg.execute(sql)}
    my = mysql_connect(url)
    with contextlib.closing(my), my.cursor() as cur:
        cur.execute(sql)
        return {r[0] for r in cur.fetchall()}


def _leftover_rows(url: str, n: int) -> None:
    """The key rows of ``n`` tenants whose jobs are gone, never claimed from."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path)) as conn, conn:
            conn.execute(
                "INSERT INTO kiln_concurrency_keys (conc_key, max) WITH RECURSIVE"
                " s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)"
                " SELECT 'kind:sync|\"gone' || i || '\"', 1 FROM s", (n,))
        return
    if parts.scheme.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT"
                       " 'kind:sync|\"gone' || i || '\"', 1 FROM generate_series(1, %s) i",
                       (n,))
        return
    my = mysql_connect(url)
    with contextlib.closing(my), my.cursor() as cur:
        for start in range(0, n, 10_000):
            cur.executemany(  # one multi-row insert per 10,000 (all values placeholders)
                "INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES (%s, %s)",
                [(f'kind:sync|"gone{i}"', 1) for i in range(start, min(n, start + 10_000))])


def _pruner(store: Store) -> Pruner:
    ctx = ServerContext(
        store=store, config=ServerConfig(prune_batch=10_000), events=EventHub(), kinds={},
        identity=Identity.named("s1"), leader_since=lambda: None,
        wake=lambda released, _reason: None,
    )
    pruner = Pruner(ctx)
    pruner.key_idle = 60.0  # the tenants below were never claimed from: idle long enough
    return pruner


async def test_rows_of_keys_no_job_needs_are_pruned_and_the_claim_cost_comes_back(
    store: Store, store_url: str
) -> None:
    # the keys that must stay: a tenant whose job runs, one whose job waits for its
    # run_at, one claimed from just now (its job completed), one whose job was cancelled
    # while running (its handler has not ended), and a queue's own limit
    await store.job_insert_many([_job("running"), _job("ending"), _job("recent")])
    claimed = await store.job_claim("q", ["sync"], 10, "s1", limited=True)
    assert len(claimed) == 3
    by_tenant = {j.args["tenant"]: j for j in claimed}
    await store.jobs_cancel(JobFilter(ids=(by_tenant["ending"].id,)))
    await store.jobs_cancel(JobFilter(ids=(by_tenant["recent"].id,)))
    await store.job_insert_many([_job("scheduled", delay=3600.0)])
    await store.concurrency_declare({"queue:other": 5})
    kept = {LIMIT.key_of("kind:sync", {"tenant": t})
            for t in ("running", "ending", "recent", "scheduled")} | {"queue:other"}
    assert _key_rows(store_url) == kept
    before = claim_work(store_url)

    # 100,000 tenants come and go. 2,000 through the store: each enqueued one job (its
    # key row written by the enqueue), which ended before a server took it; the other
    # 98,000 are what such tenants leave behind once their jobs are pruned too (their
    # rows written directly, to keep the test short)
    for start in range(0, ENQUEUED, 1_000):
        ids = await store.job_insert_many([_job(f"t{i}") for i in range(start, start + 1_000)])
        await store.jobs_cancel(JobFilter(ids=tuple(ids)))
    _leftover_rows(store_url, TENANTS - ENQUEUED)
    assert len(_key_rows(store_url)) == len(kept) + TENANTS
    grown = claim_work(store_url)
    assert grown > 10 * before, (before, grown)  # what the rows cost the claim

    counts = await _pruner(store).run_once()
    assert counts.get("concurrency_keys") == TENANTS, counts
    left = _key_rows(store_url)
    assert left == kept, sorted(left)[:10]
    after = claim_work(store_url)
    # within 2x of before, give or take a plan's shape over five rows (PostgreSQL: 3
    # before, 7 after, of 100,007 with the old rows)
    assert after <= 2 * before + 10, (before, grown, after)
    assert (await _pruner(store).run_once()).get("concurrency_keys", 0) == 0


async def test_a_requeued_job_gets_its_keys_row_back(store: Store, store_url: str) -> None:
    # the row went with the job's end; the requeue writes it again (max 1 without a
    # published declaration of the kind), so the job is claimed, one at a time
    [a, b] = await store.job_insert_many([_job("x"), _job("y")])
    claimed = await store.job_claim("q", ["sync"], 10, "s1", limited=True)
    assert {j.id for j in claimed} == {a, b}
    for row in claimed:
        await complete(store, row)
    assert await store.concurrency_keys_prune(-60.0, 100) == 2  # idle or not: no job
    assert _key_rows(store_url) == set()
    assert await store.jobs_requeue(JobFilter(ids=(a,))) == 1
    assert _key_rows(store_url) == {LIMIT.key_of("kind:sync", {"tenant": "x"})}
    assert [j.id for j in await store.job_claim("q", ["sync"], 10, "s1", limited=True)] == [a]


async def test_a_row_an_enqueue_holds_is_not_pruned(store: Store, store_url: str) -> None:
    # an enqueue that put a job under the key and has not committed holds the row: the
    # pruner, whose snapshot cannot see that job, skips the row instead of deleting it
    [a] = await store.job_insert_many([_job("x")])
    await store.jobs_cancel(JobFilter(ids=(a,)))
    key = LIMIT.key_of("kind:sync", {"tenant": "x"})
    parts = urlsplit(store_url)
    if parts.scheme == "sqlite":
        return  # one writer: the enqueue and the pruner cannot overlap
    if parts.scheme.startswith("postgres"):
        from kiln.stores.postgres._insert import CONCURRENCY_KEYS_DECLARE
        with psycopg.connect(store_url) as pg:
            pg.execute(CONCURRENCY_KEYS_DECLARE, ([key], [1]))  # open, as the enqueue's
            assert await store.concurrency_keys_prune(-60.0, 100) == 0
            pg.commit()
    else:
        my = mysql_connect(store_url, autocommit=False)
        with contextlib.closing(my), my.cursor() as cur:
            for stmt in mysql_conc.declare_stmts({key: 1}):
                cur.execute(stmt.sql, tuple(stmt.params))
            assert await store.concurrency_keys_prune(-60.0, 100) == 0
            my.commit()
    assert _key_rows(store_url) == {key}
    assert await store.concurrency_keys_prune(-60.0, 100) == 1  # released: no job
