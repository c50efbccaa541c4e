"""Small builders shared by the conformance tests."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import psycopg

from kiln._model._job import AttemptError, JobResult, JobRow, NewJob, Outcome, ServerInfo
from kiln.stores import Store
from tests.plugins.databases import mysql_connect


def job(kind: str = "k", queue: str = "q", **options: Any) -> NewJob:
    return NewJob(kind=kind, args=options.pop("args", {"n": 1}), queue=queue, **options)


async def insert(store: Store, *jobs: NewJob) -> list[int]:
    return await store.job_insert_many(list(jobs))


async def claim(store: Store, limit: int = 10, queue: str = "q", kinds: tuple[str, ...] = ("k",),
                server: str = "s1") -> list[JobRow]:
    return await store.job_claim(queue, list(kinds), limit, server)


def result(row: JobRow, outcome: Outcome = Outcome.COMPLETED, *, server: str | None = None,
           delay: float = 0.0, error: str | None = None, rescued: bool = False) -> JobResult:
    return JobResult(
        job_id=row.id, server_id=server or row.server_id or "s1", attempt=row.attempt,
        outcome=outcome, run_at_delay=delay, rescued=rescued,
        error=None if error is None else AttemptError(row.attempt, 0.0, error),
        claimed_at=row.attempted_at,  # as a server's results carry it
    )


async def complete(store: Store, row: JobRow) -> None:
    applied = await store.job_results_apply([result(row)])
    assert applied.applied == 1


def server(server_id: str = "s1", queues: dict[str, int] | None = None) -> ServerInfo:
    return ServerInfo(
        id=server_id, host=socket.gethostname(), pid=1, queues=queues or {"q": 1},
        kinds=["k"], version="test", started_at=datetime.now(UTC),
    )


async def state_of(store: Store, job_id: int) -> str | None:
    row = await store.job_get(job_id)
    return None if row is None else row.state.value


def delete_row_only(store_url: str, job_id: int) -> None:
    """Delete a job's row and nothing else, as a kiln before the prune fix pruned it:
    its dependents keep their edges to it and nobody releases them."""
    parts = urlsplit(store_url)
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path)) as conn, conn:
            conn.execute("DELETE FROM kiln_jobs WHERE id = ?", (job_id,))
    elif parts.scheme.startswith("postgres"):
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute("DELETE FROM kiln_jobs WHERE id = %s", (job_id,))
    else:
        my = mysql_connect(store_url)
        with contextlib.closing(my), my.cursor() as cur:
            cur.execute("DELETE FROM kiln_jobs WHERE id = %s", (job_id,))


def sql_exec(store_url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (``%s`` placeholders) on the test's database, directly."""
    parts = urlsplit(store_url)
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path)) as conn, conn:
            return list(conn.execute(sql.replace("%s", "?"), params).fetchall())
    if parts.scheme.startswith("postgres"):
        with psycopg.connect(store_url, autocommit=True) as pg:
            cur = pg.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
    my = mysql_connect(store_url)
    with contextlib.closing(my), my.cursor() as c:
        c.execute(sql, params)
        rows = [tuple(r) for r in c.fetchall()] if c.description else []
        my.commit()
        return rows


ROLLED_PAST = 4_102_444_800  # 2100-01-01: the rollup has counted everything


def rollup_counted_everything(store_url: str) -> None:
    """Move the timings rollup's watermark past every job (kiln._model._rollup), so the
    pruner's retention alone decides: for tests of the pruner, not of the rollup."""
    sql_exec(store_url, "UPDATE kiln_timings_mark SET rolled_to = %s WHERE name = 'default'",
             (ROLLED_PAST,))


async def roll_all(store: Store, clock: Any) -> int:
    """Move the database clock a LAG and a minute on and roll the timings rollup until
    it is caught up (kiln._model._rollup): every job finished before counts (and may
    then be pruned). Returns the jobs counted."""
    from kiln._model._rollup import LAG, MINUTE

    await clock.advance(LAG + MINUTE)
    total = 0
    for _ in range(200):
        n, done = await store.timings_roll()
        total += n
        if done:
            return total
    raise AssertionError("the rollup did not catch up in 200 windows")
