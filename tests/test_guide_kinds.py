"""docs/guide.md, "Kinds hold for every producer": its two blocks run as written."""

from __future__ import annotations

import asyncio
from typing import Any

import kiln
from tests.support.docblocks import blocks_under_test


async def test_the_guides_producer_without_handlers_gets_the_declaration(store_url: str) -> None:
    worker_block, producer_block = blocks_under_test("guide.md", __file__)[:2]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url}
    exec(worker_block, namespace)
    workers: kiln.App = namespace["workers"]
    workers.migrate()
    server: kiln.Server = namespace["server"]  # the block's own server, with the defaults
    task = asyncio.create_task(server.run())
    try:
        while server.stats().state != "running":
            assert not task.done(), task
            await asyncio.sleep(0.02)
        await asyncio.to_thread(exec, producer_block, namespace)
        client = kiln.Client(server._store)
        sent, bulk, other = [await client.get(namespace[n])
                             for n in ("job_id", "bulk_id", "other_id")]
        assert sent and (sent.queue, sent.max_attempts, sent.rate_key) == (
            "mail", 12, "email.send")
        assert bulk and (bulk.queue, bulk.max_attempts) == ("mail-bulk", 12)
        assert other and (other.queue, other.max_attempts) == ("default", 25)
    finally:
        server.stop()
        await asyncio.wait_for(task, 20)
        namespace["web"].close()
        workers.close()
