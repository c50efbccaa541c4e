"""Health that tells the truth about the store (issue 41 item 4): a store operation that
fails again and again for longer than two heartbeat intervals makes ``healthy()``
false, with the operation and its error in the reason, whatever the cause; it is
healthy again once the operation succeeds. Issue 41's trial behind PgBouncer had the
releaser fail for a minute while ``healthy()`` said ok.

The store here fails for real: its jobs table is renamed away under a running server
(its heartbeat, on another table, keeps working), then put back.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from urllib.parse import urlsplit

import kiln
import kiln.events
from kiln._server._health import failing_reasons
from kiln.stores._translator import StoreFailure
from tests.integration.inprocess import Running, config
from tests.plugins.databases import mysql_connect
from tests.support.waits import wait_for


def _rename(store_url: str, old: str, new: str) -> None:
    """Rename a table under the running server: each attempt waits half a second at
    most (1 s on MariaDB) for its lock (a server's transaction may hold one), pauses,
    and tries again."""
    deadline = time.monotonic() + 60
    while True:
        try:
            _rename_once(store_url, old, new)
            return
        except Exception as exc:
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{old} stayed locked for 60 s; holders: {_holders(store_url, old)}"
                ) from exc
            # a queued rename blocks every later reader of the table behind it: give
            # the server's transactions room to finish between two attempts
            time.sleep(0.5)


def _holders(store_url: str, table: str) -> str:
    """Who holds a lock on the table (PostgreSQL; the other stores say nothing)."""
    if not urlsplit(store_url).scheme.startswith("postgres"):
        return "unknown"
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as pg:
        rows = pg.execute(
            "SELECT a.pid, a.state, a.application_name, l.mode, left(a.query, 200)"
            " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.relation = %s::regclass AND l.granted",
            (table,),
        ).fetchall()
    return repr(rows)


def _rename_once(store_url: str, old: str, new: str) -> None:
    scheme = urlsplit(store_url).scheme
    if scheme == "sqlite":
        with sqlite3.connect(store_url[len("sqlite:///"):], timeout=30) as lite:
            lite.execute(f"ALTER TABLE {old} RENAME TO {new}")
    elif scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute("SET lock_timeout = '500ms'")
            pg.execute(f"ALTER TABLE {old} RENAME TO {new}")
    else:
        conn = mysql_connect(store_url)
        with conn, conn.cursor() as cur:
            cur.execute("SET SESSION lock_wait_timeout = 1")
            cur.execute(f"RENAME TABLE {old} TO {new}")


async def test_a_failing_store_turns_health_red_with_the_operation_and_error(
    store_url: str,
) -> None:
    app = kiln.App(store_url)

    @app.job("k")
    async def handler(job: kiln.Job) -> None: ...

    await app.amigrate()
    running = await Running(app.server({"default": 1}, config())).started()
    try:
        assert running.server.healthy()
        # in a thread: the server runs on this loop, and a transaction of its that
        # holds the table's lock must go on to its commit while the rename waits
        await asyncio.to_thread(_rename, store_url, "kiln_jobs", "kiln_jobs_away")
        def claim_failing() -> str | None:
            health = running.server.healthy()
            assert health.store_failing == any("store operation" in r for r in health.reasons)
            return next((r for r in health.reasons if "operation job_claim" in r), None)

        reason = await wait_for(claim_failing, 15, "health to say the claim fails")
        assert not running.server.healthy()
        assert "store operation job_claim failing for" in reason
        assert "kiln_jobs" in reason  # the database's own error says what it misses
        # the events (kilnotel's kiln.db.errors counts them) reach subscribers on the
        # hub's own thread, after the health read above: wait for both operations'
        def failed() -> set[str] | None:
            seen = {e.operation for e in running.of(kiln.events.StoreFailed)}
            return seen if {"job_claim", "jobs_release_due"} <= seen else None

        await wait_for(failed, 15, "StoreFailed events of the claim and the releaser")
        await asyncio.to_thread(_rename, store_url, "kiln_jobs_away", "kiln_jobs")
        await wait_for(lambda: bool(running.server.healthy()) or None, 15,
                       "health to be ok again")
    finally:
        await running.stop()
        await app.aclose()


def test_the_bound_counts_persistent_failures_only() -> None:
    def failure(since: float, at: float, count: int) -> StoreFailure:
        return StoreFailure("job_claim", since, at, "job_claim: boom", count)

    assert failing_reasons([failure(0.0, 9.0, 5)], bound=10.0, now=9.5) == []  # too young
    assert failing_reasons([failure(0.0, 0.0, 1)], bound=1.0, now=5.0) == []  # once only
    assert failing_reasons([failure(0.0, 9.0, 5)], bound=1.0, now=9.0 + 301) == []  # gone
    assert failing_reasons([failure(0.0, 9.0, 5)], bound=1.0, now=10.0) == [
        "store operation job_claim failing for 10.0s (5 calls): job_claim: boom"
    ]
