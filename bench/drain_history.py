"""A year of history in each system's own tables, for ``bench_drain --finished-rows N``.

Each system gets N finished jobs the way its own code and maintenance would leave them
after running them (1 in 10 failed after 3 attempts, the rest succeeded, finished 2 to 22
hours ago, about 250 bytes of args), then ``VACUUM ANALYZE`` as autovacuum would have
done by then. What each system keeps of a finished job differs:

- kiln: the job's row stays in ``kiln_jobs`` (state ``completed`` or ``failed``, with
  ``finished_at``) until its pruner deletes it after the retention (completed jobs 1 day,
  failed 7 days by default). Enqueued through the public API, then aged by SQL, as
  ``bench_scale``'s drain case does.
- pgqueuer 1.6: a finished job's row is deleted from the queue table ``pgqueuer``
  (unless ``on_failure="hold"``, not the default); every transition is a row of
  ``pgqueuer_log`` (``queued``, ``picked``, then ``successful`` or ``exception``; a retry
  adds ``queued`` and ``picked`` again), folded by its workers into per-second buckets
  of ``pgqueuer_statistics`` (``aggregated`` set). Nothing in pgqueuer deletes log rows
  by age. So N finished jobs are 3 log rows each (7 for a failed one), aggregated, and
  their buckets.
- procrastinate 3.10: the job's row stays in ``procrastinate_jobs`` (status
  ``succeeded`` or ``failed``; the worker's ``delete_jobs`` defaults to ``never``, and
  the ``remove_old_jobs`` builtin task is opt-in), with one ``procrastinate_events`` row
  per transition (``deferred``, ``started``, ``succeeded``; a failed one after 3 attempts
  adds ``deferred_for_retry`` and ``started`` twice, then ``failed``).

The peers' rows are written by SQL (triggers off, as their own functions write the same
columns); the job ids' sequences are moved past the history so that new jobs follow it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

ARGS = json.dumps({"tenant": "tenant-7", "order_id": 123456, "email": "user123456@example.com",
                   "url": "https://api.example.com/v2/orders/123456/sync",
                   "items": [123456, 123457, 123458],
                   "note": "priority customer, resend the invoice if the first attempt bounced"})
BATCH = 100_000


def _execute(url: str, statements: list[tuple[str, Any]]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for sql, params in statements:
            conn.execute(sql, params)


def kiln_history(url: str, n: int) -> None:
    """N finished kiln jobs in the database at ``url`` (migrated here), then VACUUM ANALYZE."""
    from bench import bench_scale

    db = bench_scale.Db("postgresql", url=url)
    try:
        asyncio.run(bench_scale.fill_history(db, n))
    finally:
        db.close()


def pgqueuer_history(url: str, n: int) -> None:
    """N finished pgqueuer jobs (schema installed already), then VACUUM ANALYZE."""
    traceback = json.dumps({"exception_type": "ConnectionError", "exception_message":
                            "upstream api.example.com timed out after 30s",
                            "traceback": bench_traceback(), "additional_context": None})
    statements: list[tuple[str, Any]] = []
    for lo in range(1, n + 1, BATCH):
        hi = min(lo + BATCH - 1, n)
        # one row per transition: step 0 queued, then picked/queued pairs, then the end
        statements.append((
            "INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint,"
            " traceback, aggregated)"
            " SELECT now() - interval '2 hours' - (g %% 72000) * interval '1s'"
            " - (steps - s) * interval '20 ms', g,"
            " (CASE WHEN s = 0 THEN 'queued' WHEN s = steps THEN"
            " (CASE WHEN g %% 10 = 0 THEN 'exception' ELSE 'successful' END)"
            " WHEN s %% 2 = 1 THEN 'picked' ELSE 'queued' END)::pgqueuer_status,"
            " 0, 'noop', CASE WHEN s > 0 AND s %% 2 = 0 AND g %% 10 = 0 THEN %s::jsonb END,"
            " true"
            " FROM generate_series(%s::bigint, %s::bigint) g,"
            " LATERAL (SELECT CASE WHEN g %% 10 = 0 THEN 6 ELSE 2 END AS steps) t,"
            " LATERAL generate_series(0, t.steps) s",
            (traceback, lo, hi)))
    statements += [
        ("INSERT INTO pgqueuer_statistics (count, created, entrypoint, priority, status)"
         " SELECT count(*), date_trunc('sec', created), entrypoint, priority, status"
         " FROM pgqueuer_log GROUP BY entrypoint, priority, status, date_trunc('sec', created)",
         None),
        ("SELECT setval(pg_get_serial_sequence('pgqueuer', 'id'), %s)", (n,)),
        ("VACUUM ANALYZE", None),
    ]
    _execute(url, statements)


def procrastinate_history(url: str, n: int) -> None:
    """N finished procrastinate jobs (schema applied already), then VACUUM ANALYZE."""
    statements: list[tuple[str, Any]] = [("SET session_replication_role = replica", None)]
    for lo in range(1, n + 1, BATCH):
        hi = min(lo + BATCH - 1, n)
        statements.append((
            "INSERT INTO procrastinate_jobs (id, queue_name, task_name, priority, args,"
            " status, attempts)"
            " SELECT g, 'default', 'noop', 0, %s::jsonb,"
            " (CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END)"
            "::procrastinate_job_status, CASE WHEN g %% 10 = 0 THEN 3 ELSE 1 END"
            " FROM generate_series(%s::bigint, %s::bigint) g", (ARGS, lo, hi)))
        statements.append((
            "INSERT INTO procrastinate_events (job_id, type, at)"
            " SELECT g, (CASE WHEN s = 0 THEN 'deferred' WHEN s = steps THEN"
            " (CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END)"
            " WHEN s %% 2 = 1 THEN 'started' ELSE 'deferred_for_retry' END)"
            "::procrastinate_job_event_type,"
            " now() - interval '2 hours' - (g %% 72000) * interval '1s'"
            " - (steps - s) * interval '20 ms'"
            " FROM generate_series(%s::bigint, %s::bigint) g,"
            " LATERAL (SELECT CASE WHEN g %% 10 = 0 THEN 6 ELSE 2 END AS steps) t,"
            " LATERAL generate_series(0, t.steps) s", (lo, hi)))
    statements += [
        ("SET session_replication_role = DEFAULT", None),
        ("SELECT setval(pg_get_serial_sequence('procrastinate_jobs', 'id'), %s)", (n,)),
        ("SELECT setval(pg_get_serial_sequence('procrastinate_events', 'id'),"
         " (SELECT max(id) FROM procrastinate_events))", None),
        ("VACUUM ANALYZE", None),
    ]
    _execute(url, statements)


def bench_traceback() -> str:
    from bench.bench_scale import TRACEBACK

    return TRACEBACK


def sizes(url: str, tables: list[str]) -> dict[str, Any]:
    """Rows and sizes (MB, table and indexes) of the system's own tables."""
    import psycopg

    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {table}), pg_table_size('{table}'),"
                f" pg_indexes_size('{table}')").fetchone()
            assert row is not None
            out[table] = {"rows": row[0], "table_mb": round(row[1] / 1e6, 1),
                          "indexes_mb": round(row[2] / 1e6, 1)}
    return out


HISTORY = {"kiln": kiln_history, "pgqueuer": pgqueuer_history,
           "procrastinate": procrastinate_history}
TABLES = {"kiln": ["kiln_jobs"], "pgqueuer": ["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"],
          "procrastinate": ["procrastinate_jobs", "procrastinate_events"]}
