"""A user's transaction holding a row lock that a results write needs, past the
database's timeout, is contention, not a bad result (issue 39 item 2; audit H2).

The lock comes from kiln's own API: a producer's transactional enqueue of a job that
depends on the running job locks that job's row until the producer commits. The
results write of the running job then waits past PostgreSQL's statement_timeout (set
on the server's sessions here) or MariaDB's innodb_lock_wait_timeout (kiln's, lowered
here to 1 s) and fails. Before the fix the completed job was recorded failed, its
result dropped, its dependent left awaiting for good; on MariaDB the waiting write also
held the one connection the heartbeat needed, and the server fenced itself.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

import kiln
import kiln.events
from kiln import JobState
from kiln.stores import store_from_url
from tests.plugins.databases import mysql_connect
from tests.support.results import Serve
from tests.support.waits import wait_for

TIMEOUT_MS = 300  # PostgreSQL: statement_timeout of the server's sessions
HOLD = 3.0  # seconds the producer's transaction stays open: several timeouts


def with_statement_timeout(url: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query.get('options', '')} -cstatement_timeout={TIMEOUT_MS}".strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def connect(url: str) -> Any:
    if url.startswith("postgresql"):
        import psycopg

        return psycopg.connect(url)
    return mysql_connect(url, autocommit=False)


async def test_a_completed_job_stays_completed_while_a_user_holds_its_row(
    store_url: str, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store_url.startswith("sqlite"):
        pytest.skip("sqlite: a user's write transaction locks the whole file, the"
                    " heartbeat's write too (docs/operating.md, SQLite)")
    if store_url.startswith("mysql"):
        from kiln.stores.mysql import _kept

        monkeypatch.setattr("kiln.stores.mysql._store.SESSION", _kept.SESSION.replace(
            "innodb_lock_wait_timeout = 10", "innodb_lock_wait_timeout = 1"))
    # only the server's sessions get the timeout (a migration waits on a lock that
    # every test database here shares)
    url = with_statement_timeout(store_url) if store_url.startswith("postgres") else store_url
    app = kiln.App(store_url)
    go = asyncio.Event()

    @app.job("report.build", queue="q", max_attempts=5)
    async def build(job: kiln.Job) -> dict[str, int]:
        await go.wait()
        return {"rows": 42}

    @app.job("report.mail", queue="q")
    async def mail(job: kiln.Job) -> None:
        return None

    @app.job("ping", queue="q")
    async def ping(job: kiln.Job) -> None:  # other work completes meanwhile
        return None

    fenced: list[kiln.events.Fenced] = []
    server = await serve(app, {"q": 4}, store=store_from_url(url))
    server.events.subscribe(fenced.append, types=[kiln.events.Fenced])
    client = app.client()
    parent = await client.enqueue("report.build", {})

    async def running() -> bool:
        row = await client.get(parent)
        return row is not None and row.state is JobState.RUNNING

    await wait_for(running, 10, "the report runs")
    locked, commit = threading.Event(), threading.Event()
    child: list[int] = []

    def producer() -> None:  # a web request: its own transaction, open for a while
        conn = connect(store_url)
        try:
            child.append(app.enqueue("report.mail", {}, depends_on=[parent], conn=conn))
            locked.set()
            commit.wait(30)
            conn.commit()
        finally:
            conn.close()

    thread = threading.Thread(target=producer)
    thread.start()
    assert await asyncio.to_thread(locked.wait, 10)
    go.set()  # the handler returns now: its results write meets the producer's lock
    for _ in range(int(HOLD / 0.1)):
        await client.enqueue("ping", {})
        await asyncio.sleep(0.1)
    health = server.healthy()  # the results path reports its wait; the heartbeat goes on
    assert not health.fenced and not health.heartbeat_stale, health.reasons
    assert server.stats().results_pending >= 1, "the write is waiting, not dropped"
    commit.set()
    await asyncio.to_thread(thread.join, 10)

    async def mailed() -> bool:
        row = await client.get(child[0])
        return row is not None and row.state is JobState.COMPLETED

    await wait_for(mailed, 15, "the dependent ran once the producer committed")
    row = await client.get(parent)
    assert row is not None
    assert (row.state, row.attempt, row.result, row.errors) == (
        JobState.COMPLETED, 1, {"rows": 42}, [])
    assert server.stats().results_poisoned == 0
    assert fenced == [], "the heartbeat never waited behind the blocked write"
    assert server.healthy(), server.healthy().reasons
    await app.aclose()
