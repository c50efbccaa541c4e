"""A stop takes effect promptly while the database does not answer.

Found by the chaos suite (tests/chaos): a worker SIGTERMed during a real PostgreSQL
restart took 11.2 s to exit, waiting on its queue-controls read. Cancelling a task that
waits in a database call does not end it at once: psycopg then asks the server to cancel
the query over a new connection (up to 5 s, then 5 s more for the query to end), and a
wait for a pool connection runs to the pool's timeout. Here the proxy between the
server and the database stops forwarding (requests wait, as behind a network that drops
everything), with a connect_timeout far above the bound, so that a stop that waited on
any of those would show.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

import kiln
from tests.cluster.proxy import Proxy
from tests.support.config import FAST
from tests.support.waits import wait_for

CONNECT_TIMEOUT = 30.0  # the pool's timeout too: a stop must not depend on it
# claim_timeout (2 s) + a stuck service's two cancels (1 s) + deregister (2 s) + the
# pool's close (1 s), with margin for a loaded machine: well under CONNECT_TIMEOUT
BOUND = 9.0


async def proxied(url: str) -> tuple[str, Proxy]:
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc)), proxy


async def test_a_stop_while_the_database_is_silent_returns_within_a_bound(
    store_url: str,
) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("the proxy stands between a server and a networked PostgreSQL")
    url, proxy = await proxied(store_url)
    app = kiln.App(url, connect_timeout=CONNECT_TIMEOUT)
    started = asyncio.Event()

    @app.job("hold", queue="q", max_attempts=3)
    async def hold(job: kiln.Job) -> None:
        started.set()
        await asyncio.sleep(60)

    await app.amigrate()
    server = app.server({"q": 2, "r": 1}, kiln.ServerConfig(**FAST))
    run = asyncio.create_task(server.run())
    try:
        await app.aenqueue("hold", {})
        await asyncio.wait_for(started.wait(), 20)
        await app.aclose()
        proxy.stall()
        # its calls are stuck now: the heartbeat's, so the server fences itself off
        await wait_for(lambda: server.healthy().fenced, 10, "the server to fence itself")
        t0 = time.monotonic()
        server.stop()
        await asyncio.wait_for(asyncio.shield(run), CONNECT_TIMEOUT + 20)
        took = time.monotonic() - t0
    finally:
        server.stop(force=True)
        proxy.resume()
        await asyncio.wait({run}, timeout=CONNECT_TIMEOUT + 20)
        await proxy.close()
    assert took < BOUND, f"a stop with the database silent took {took:.1f}s"
    assert server.stats().state == "stopped"
