"""PostgreSQL: the results statement finds its jobs by primary key, with a generic plan.

Statistics taken while few jobs run (autovacuum's ANALYZE of a table whose jobs wait)
say that almost no row has state 'running'. A plan that sees the value 'running'
then estimates one row in kiln_jobs_state_queue and walks that index for every batch,
dead entries of every job the server has run included (until a vacuum), and
PostgreSQL plans it anew at every batch because its estimate beats the generic plan's.
Measured before the statement read its parameters through a subquery of their own:
0 generic plans in 51 batches of a drain after an ANALYZE, 0.5 to 0.8 ms of planning
a batch.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from kiln._model._job import JobResult, Outcome
from kiln.stores import Store
from kiln.stores.postgres._jobs import _numbered, _results_stmt
from tests.stores.pg_plans import plan_nodes, postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

RUNNING = 40
pg_url = postgres_only("a plan check of its results statement")


def _results(ids: list[int], stored: bool) -> list[JobResult]:
    return [JobResult(job_id=i, server_id="s1", attempt=1, outcome=Outcome.COMPLETED,
                      result='{"n": 1}' if stored else None) for i in ids]


@pytest.mark.parametrize("stored", [False, True], ids=["no result", "stored result"])
async def test_results_run_a_generic_plan_by_primary_key(
    pg_url: str, store: Store, stored: bool
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
            " SELECT 'q', 'k', 'available', '{}', now(), 25 FROM generate_series(1, 5000)")
        conn.execute("ANALYZE kiln_jobs")  # nothing runs: 'running' is rare to the planner
        ids = [r[0] for r in conn.execute(
            "UPDATE kiln_jobs SET state = 'running', server_id = 's1', attempt = 1 WHERE id IN"
            " (SELECT id FROM kiln_jobs ORDER BY id LIMIT %s) RETURNING id", (RUNNING,))]
        stmt = _results_stmt(_results(sorted(ids), stored), with_dependents=False)
        for _ in range(10):  # psycopg forgets what it prepared when a transaction rolls back
            rows = conn.execute(stmt.sql, stmt.params, prepare=True).fetchall()
            assert len(rows) == RUNNING
            conn.execute("UPDATE kiln_jobs SET state = 'running', server_id = 's1',"
                         " attempt = 1, finished_at = NULL WHERE id = ANY(%s)", (ids,))
        plans = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                             " WHERE statement LIKE 'WITH r AS%%'").fetchall()
        assert plans and plans[0][0] >= 5, plans  # not planned again at every batch
        conn.execute("SET plan_cache_mode = force_generic_plan")
        types = ["bigint[]", "text[]", "int[]", "text[]", "int[]", "float8[]", "text[]",
                 "int[]", "bool[]", "timestamptz[]", *(["text[]"] if stored else []), "text",
                 "bool"]
        conn.execute(f"PREPARE results ({', '.join(types)})"
                     f" AS {_numbered(stmt.sql.replace('%b', '%s'))}")
        with conn.transaction(force_rollback=True):
            placeholders = ", ".join(f"%s::{t}" for t in types)
            cur = psycopg.ClientCursor(conn)  # values inlined: EXECUTE takes no bind parameters
            plan = cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE results({placeholders})",
                               stmt.params).fetchall()[0][0]
    text = json.dumps(plan)
    scans = [n for n in plan_nodes(plan[0]["Plan"])
             if n.get("Relation Name") == "kiln_jobs" and n["Node Type"] != "ModifyTable"]
    assert scans and all(n.get("Index Name") == "kiln_jobs_pkey" for n in scans), text
    assert all(n.get("Actual Rows", 0) <= 1 for n in scans), text
