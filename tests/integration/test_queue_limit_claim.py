"""A queue's limit on servers none of whose kinds has a limit of its own: their pools
claim without keys (Store.job_claim(keys=False), the queue's part of the limited claim
alone), and the limit holds across two servers, counted by the handlers as they run and
by the database while they run; a server with a limited kind keeps the full claim."""

from __future__ import annotations

import asyncio
import collections

import kiln

LIMIT = 3
JOBS = 24


def _app(url: str, running: collections.Counter[str], most: collections.Counter[str],
         limited_kind: bool = False) -> kiln.App:
    app = kiln.App(url)
    app.queue_concurrency("q", kiln.Concurrency(max=LIMIT))

    @app.job("t.plain", queue="q")
    async def plain(job: kiln.Job) -> None:
        running["q"] += 1
        most["q"] = max(most["q"], running["q"])
        try:
            await asyncio.sleep(0.03)
        finally:
            running["q"] -= 1

    if limited_kind:
        @app.job("t.keyed", queue="q", concurrency=kiln.Concurrency(max=5))
        async def keyed(job: kiln.Job) -> None:
            return None

    return app


async def test_a_queue_limit_holds_for_servers_claiming_without_keys(store_url: str) -> None:
    running: collections.Counter[str] = collections.Counter()
    most: collections.Counter[str] = collections.Counter()
    apps = [_app(store_url, running, most) for _ in range(2)]
    apps[0].migrate()
    config = kiln.ServerConfig(poll_interval=0.05)
    servers = [app.server({"q": 4}, config=config) for app in apps]
    tasks = [asyncio.create_task(s.run()) for s in servers]
    seen = 0
    try:
        while any(s.stats().state != "running" for s in servers):
            assert not any(t.done() for t in tasks), tasks
            await asyncio.sleep(0.02)
        assert [s._pools["q"].limited for s in servers] == [True, True]
        assert [s._pools["q"].keys for s in servers] == [False, False]
        await apps[0].aenqueue_many([("t.plain", {"n": n}) for n in range(JOBS)])
        client = kiln.Client(servers[0]._store)
        done = kiln.JobFilter(states=(kiln.JobState.COMPLETED,))
        async with asyncio.timeout(30):
            while await client.count(done) < JOBS:
                seen = max(seen, (await client.concurrency_in_use()).get("queue:q", 0))
                await asyncio.sleep(0.01)
    finally:
        for server in servers:
            server.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
        for app in apps:
            await app.aclose()
    assert most["q"] == LIMIT  # reached, never passed, by the handlers' own count
    assert seen <= LIMIT


async def test_a_server_with_a_limited_kind_claims_with_keys(store_url: str) -> None:
    running: collections.Counter[str] = collections.Counter()
    app = _app(store_url, running, collections.Counter(), limited_kind=True)
    app.migrate()
    server = app.server({"q": 2}, config=kiln.ServerConfig(poll_interval=0.05))
    task = asyncio.create_task(server.run())
    try:
        while server.stats().state != "running":
            assert not task.done()
            await asyncio.sleep(0.02)
        assert (server._pools["q"].limited, server._pools["q"].keys) == (True, True)
    finally:
        server.stop()
        await asyncio.wait_for(task, 20)
        await app.aclose()
