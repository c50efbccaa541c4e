"""PostgreSQL: the plain claim does not walk past a blocked backlog of limited jobs.

100,000 available jobs of one full concurrency key wait ahead (by run_at) of a few
plain jobs in the same queue. EXPLAIN ANALYZE of the store's own claim statement
(_jobs.CLAIM, as a generic plan, the way the prepared statement runs): it goes
through kiln_jobs_claim, which holds plain jobs only, and reads only the rows it
claims.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from kiln.stores import Store
from kiln.stores.postgres._concurrency import CLAIM_NAMES, CLAIM_SQL, QUEUE_NAMES, QUEUE_SQL
from kiln.stores.postgres._jobs import CLAIM, _numbered
from tests.stores.pg_plans import plan_nodes, postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

BLOCKED = 100_000
pg_url = postgres_only("a plan check of its claim index")


async def test_the_plain_claim_skips_a_blocked_backlog(pg_url: str, store: Store) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, conc_key)"
            " SELECT 'q', 'k', 'available', '{}', now() - interval '1 hour'"
            " + g * interval '1 ms', 25, 'kind:k' FROM generate_series(1, %s) g", (BLOCKED,))
        conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                     " conc_key) SELECT 'q', 'k', 'running', '{}', now(), 25, 'kind:k'")
        conn.execute("INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES ('kind:k', 1)")
        conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                     " SELECT 'q', 'k', 'available', '{}', now(), 25 FROM generate_series(1, 20)")
        conn.execute("ANALYZE kiln_jobs")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE plain (text, text, text[], int, int) AS {_numbered(CLAIM)}")
        conn.execute("BEGIN")
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plain('s1', 'q', '{k}', 10, 10)"
                            ).fetchall()[0][0]
        conn.execute("ROLLBACK")
    text = json.dumps(plan)
    assert "kiln_jobs_claim" in text, text
    assert not [n for n in plan_nodes(plan[0]["Plan"], "Seq Scan")
                if n.get("Relation Name") == "kiln_jobs"], text
    scans = list(plan_nodes(plan[0]["Plan"], "Index Scan"))
    assert scans and all(s.get("Actual Rows", 0) <= 10 for s in scans), text
    assert all(s.get("Rows Removed by Filter", 0) < 100 for s in scans), text
    assert len(await store.job_claim("q", ["k"], 10, "s1", limited=True)) == 10


@pytest.mark.parametrize("keys", [True, False], ids=["claim with keys", "without keys"])
async def test_a_queue_limited_claim_reads_only_what_it_takes(
    pg_url: str, store: Store, keys: bool
) -> None:
    """A queue with a limit claims through _concurrency (CLAIM_LIMITED, one statement,
    or CLAIM_QUEUE_LIMITED for a pool without limits on its kinds); its plain jobs are
    walked per kind along kiln_jobs_claim (queue, kind, ...), so a backlog of 100,000
    is neither read nor sorted (it was, 51 ms a claim, when the walk asked for
    kind = ANY(...) over an index with kind second)."""
    limit = 10
    sql, names = (CLAIM_SQL, CLAIM_NAMES) if keys else (QUEUE_SQL, QUEUE_NAMES)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for kind in ("k", "k2"):
            conn.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                " SELECT 'q', %s, 'available', '{}', now() - interval '1 hour'"
                " + g * interval '1 ms', 25 FROM generate_series(1, %s) g", (kind, BLOCKED // 2))
        conn.execute("INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES ('queue:q', 1000)")
        conn.execute("ANALYZE kiln_jobs")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE lim AS {_numbered(sql)}")
        params = {"qkey": "queue:q", "q": "q", "kinds": ["k", "k2"], "limit": limit,
                  "server": "s1"}
        args = ", ".join(_literal(params[n]) for n in names)
        conn.execute("BEGIN")
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lim({args})").fetchall()[0][0]
        conn.execute("ROLLBACK")
    text = json.dumps(plan)
    reads = [n for kind in ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan")
             for n in plan_nodes(plan[0]["Plan"], kind) if n.get("Relation Name") == "kiln_jobs"]
    assert not [n for n in reads if n["Node Type"] == "Seq Scan"], text
    assert reads and all(n.get("Actual Rows", 0) <= limit for n in reads), text
    assert "kiln_jobs_claim" in text, text
    taken = await store.job_claim("q", ["k", "k2"], limit, "s1", limited=True, keys=keys)
    assert len(taken) == limit


def _literal(value: object) -> str:
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]::text[]"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


@pytest.mark.parametrize("claim", ["plain", "with keys", "without keys"])
async def test_a_claim_is_not_planned_at_every_claim(
    pg_url: str, store: Store, claim: str
) -> None:
    """After its first five runs a prepared statement runs PostgreSQL's generic plan
    unless that plan's estimate is worse than the custom plans': with statistics on the
    table (autovacuum's), a statement whose estimates hang on its parameters (a LIMIT
    given as one, a value compared in a scan) is planned again at every claim. Measured
    before the claims passed their parameters through a row of their own: the plain
    claim planned at every run, 0.2 ms each; the claim with keys 1.5 ms, half its time."""
    params: dict[str, object] = {"qkey": "queue:q", "q": "q", "kinds": ["k"], "limit": 5,
                                 "server": "s1"}
    args: tuple[object, ...]
    if claim == "plain":
        sql, args = CLAIM, ("s1", "q", ["k"], 5, 5)
    else:
        sql, names = (CLAIM_SQL, CLAIM_NAMES) if claim == "with keys" else (QUEUE_SQL,
                                                                            QUEUE_NAMES)
        args = tuple(params[n] for n in names)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
            " SELECT 'q', 'k', 'available', '{}', now(), 25 FROM generate_series(1, 2000)")
        if claim != "plain":
            conn.execute("INSERT INTO kiln_concurrency_keys (conc_key, max)"
                         " VALUES ('queue:q', 1000)")
        conn.execute("ANALYZE kiln_jobs")
        for _ in range(10):
            conn.execute(sql, args, prepare=True)
        plans = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                             " WHERE statement NOT LIKE 'INSERT%%'").fetchall()
    assert plans and plans[0][0] >= 5, plans


async def test_a_claim_with_keys_counts_running_jobs_once(pg_url: str, store: Store) -> None:
    """The claim counts the running jobs of all its keys in one grouped read. Counted
    key by key, the count followed whichever index the statistics favoured: with
    statistics taken before any job ran (a backlog enqueued, then analyzed),
    kiln_jobs_state_queue, so each key's count walked every running job of the table,
    and twice (the filter and the result): ten keys, 500 running jobs, 10,000 rows read
    a claim (bench/RESULTS.md, "Global concurrency limits", 2026-12-07)."""
    keys, running, limit = 10, 50, 20
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, conc_key)"
            " SELECT 'q', 'k', 'available', '{}', now(), 25, 'kind:k|' || (g %% %s)"
            " FROM generate_series(1, 2000) g", (keys,))
        conn.execute("INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT"
                     " 'kind:k|' || g, 1000 FROM generate_series(0, %s - 1) g", (keys,))
        conn.execute("ANALYZE kiln_jobs")  # before any job runs
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, conc_key)"
            " SELECT 'q', 'k', 'running', '{}', now(), 25, 'kind:k|' || (g %% %s)"
            " FROM generate_series(1, %s) g", (keys, keys * running))
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE lim AS {_numbered(CLAIM_SQL)}")
        params = {"qkey": "queue:q", "q": "q", "kinds": ["k"], "limit": limit, "server": "s1"}
        args = ", ".join(_literal(params[n]) for n in CLAIM_NAMES)
        conn.execute("BEGIN")
        plan = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lim({args})").fetchall()[0][0]
        conn.execute("ROLLBACK")
    text = json.dumps(plan)
    reads = [n for kind in ("Seq Scan", "Index Scan", "Index Only Scan")
             for n in plan_nodes(plan[0]["Plan"], kind) if n.get("Relation Name") == "kiln_jobs"]
    read = sum((n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0))
               * n.get("Actual Loops", 1) for n in reads)
    assert read <= 2 * keys * running, (read, text)
    assert len(await store.job_claim("q", ["k"], limit, "s1", limited=True)) == limit
