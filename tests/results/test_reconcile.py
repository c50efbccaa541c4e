"""Reconciliation: a claim whose commit succeeded but whose reply was lost leaves its
jobs running under a live server that does not know them (issue 22 defect 2, issue 17
hole 1). The server compares what the database says it runs with what it runs and
hands the difference back without using an attempt.

PostgreSQL and MariaDB: the server's store connects through the loopback proxy
(tests/flow/proxy.py), which drops the reply to the claim and then the connection,
once the claim has committed. SQLite has no connection to cut: there the claim
commits and the store call then raises as on a lost connection. Before the fix the
jobs stayed running past dead_after under a healthy server, on every store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

import kiln
import kiln.events
from kiln import JobState, UnreachableError
from kiln._model._job import JobRow
from kiln.stores import Store, store_from_url
from tests.support.results import Serve, proxied
from tests.support.waits import wait_for

QUEUE = "reconciled"
DEAD_AFTER = 6.0


def app_of(url: str, started: list[int]) -> kiln.App:
    app = kiln.App(url)

    @app.job("work", queue=QUEUE)
    async def work(job: kiln.Job) -> None:
        started.append(job.id)

    return app


def claim_request(backend: str) -> bytes:
    # PostgreSQL binds the prepared claim with the queue as a parameter; MySQL sends
    # the claim's second statement (UPDATE ... COMMIT) as text
    return QUEUE.encode() if backend.startswith("postgres") else b"SET state = 'running'"


async def test_a_claim_whose_reply_is_lost_is_handed_back_under_a_live_server(
    store_url: str, store: Store, backend: str, serve: Serve
) -> None:
    if backend == "sqlite":
        pytest.skip("sqlite: no network connection to cut (see the store-boundary test)")
    proxy, url = await proxied(store_url)
    started: list[int] = []
    app = app_of(store_url, started)
    await app.amigrate()
    ids = [await app.client().enqueue("work", {"i": i}) for i in range(2)]
    proxied_store = store_from_url(url)
    real_claim = proxied_store.job_claim
    lost: list[asyncio.Future[asyncio.Task[None]]] = []

    async def claim(queue: str, kinds: Sequence[str], limit: int, server_id: str,
                    limited: bool = False, keys: bool = True) -> list[JobRow]:
        if not lost:  # the pool's first claim, which finds both jobs
            lost.append(proxy.lose_reply(lambda data: claim_request(backend) in data))
        return await real_claim(queue, kinds, limit, server_id, limited, keys)

    proxied_store.job_claim = claim  # type: ignore[method-assign]
    reconciled: list[kiln.events.JobReconciled] = []
    server = await serve(app, {QUEUE: 2}, store=proxied_store)
    server.events.subscribe(reconciled.append, types=[kiln.events.JobReconciled])
    await wait_for(lambda: _running(store, ids, server.id), 10, "the claim committed")
    cut_at = time.monotonic()
    (await asyncio.wait_for(lost[0], 5)).cancel()  # and the reply never arrives
    await _check_reconciled(store, ids, server, cut_at, started, reconciled)
    await proxy.cut()
    await app.aclose()


async def test_a_committed_claim_that_raises_is_handed_back(
    store_url: str, store: Store, serve: Serve
) -> None:
    """The same at the store boundary, on every store: the claim commits, then the call
    raises as it does when the connection is lost with the reply."""
    started: list[int] = []
    app = app_of(store_url, started)
    await app.amigrate()
    ids = [await app.client().enqueue("work", {"i": i}) for i in range(2)]
    server_store = store_from_url(store_url)
    real_claim = server_store.job_claim
    lost: list[list[JobRow]] = []

    async def claim(queue: str, kinds: Sequence[str], limit: int, server_id: str,
                    limited: bool = False, keys: bool = True) -> list[JobRow]:
        rows = await real_claim(queue, kinds, limit, server_id, limited, keys)
        if rows and not lost:
            lost.append(rows)
            raise UnreachableError("job_claim", "connection lost with the reply")
        return rows

    server_store.job_claim = claim  # type: ignore[method-assign]
    reconciled: list[kiln.events.JobReconciled] = []
    server = await serve(app, {QUEUE: 2}, store=server_store)
    server.events.subscribe(reconciled.append, types=[kiln.events.JobReconciled])
    await wait_for(lambda: _lost(lost), 10, "a claim lost its reply")
    cut_at = time.monotonic()
    assert {r.id for r in lost[0]} <= set(ids) and not started
    await _check_reconciled(store, [r.id for r in lost[0]], server, cut_at, started,
                            reconciled)
    await app.aclose()


async def _lost(lost: list[list[JobRow]]) -> bool:
    return bool(lost)


async def _running(store: Store, ids: Sequence[int], server_id: str) -> bool:
    rows = [await store.job_get(i) for i in ids]
    return all(r is not None and r.state is JobState.RUNNING and r.server_id == server_id
               for r in rows)


async def _check_reconciled(
    store: Store, ids: Sequence[int], server: kiln.Server, cut_at: float,
    started: Sequence[int],
    reconciled: list[kiln.events.JobReconciled],
) -> None:
    async def completed() -> bool:
        rows = [await store.job_get(i) for i in ids]
        return all(r is not None and r.state is JobState.COMPLETED for r in rows)

    await wait_for(completed, DEAD_AFTER, "completed before dead_after: not stuck running")
    took = time.monotonic() - cut_at
    assert server.healthy(), server.healthy().reasons
    for job_id in ids:
        row = await store.job_get(job_id)
        assert row is not None and row.attempt == 1, row  # the hand-back used no attempt
    assert sorted(started) == sorted(ids)  # each ran once, after it was handed back
    assert sorted(e.job_id for e in reconciled) == sorted(ids)
    assert {e.action for e in reconciled} == {"handed_back"}
    assert server.stats().rescued == 0
    print(f"reconciled {len(ids)} jobs {took:.2f}s after their claim's reply was lost")
