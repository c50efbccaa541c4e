"""A server whose event loop stood still past the fence (a paused process, a handler
that blocked the loop) writes no checkpoint before it fences itself.

Found by the chaos suite (tests/chaos): a worker SIGSTOPped for longer than dead_after
woke up and its handler's next checkpoint reached the database, before the heartbeat
loop got to fence the server. Claims already check that the heartbeat is recent
enough to act on; checkpoints did not. Here the handler blocks the loop itself, so the
write is the first thing the loop does after the stall, every time.
"""

from __future__ import annotations

import asyncio
import time

import kiln
from tests.support.config import FAST

FENCE_AFTER = 3 * FAST["heartbeat_interval"]


async def test_a_checkpoint_after_a_stall_past_the_fence_is_refused(store_url: str) -> None:
    app = kiln.App(store_url)
    outcome: asyncio.Queue[str] = asyncio.Queue()

    @app.job("stall", queue="q", max_attempts=1)
    async def stall(job: kiln.Job) -> None:
        await job.set_param("before", True)
        time.sleep(FENCE_AFTER + 0.5)  # the loop stands still: no heartbeat, no fence yet
        try:
            await job.set_param("after", True)
        except kiln.FencedError:
            outcome.put_nowait("refused")
            raise
        except asyncio.CancelledError:  # the fence caught up while the write was out
            outcome.put_nowait("cancelled")
            raise
        outcome.put_nowait("written")

    await app.amigrate()
    server = app.server({"q": 1}, kiln.ServerConfig(**FAST))
    run = asyncio.create_task(server.run())
    try:
        job_id = await app.aenqueue("stall", {})
        seen = await asyncio.wait_for(outcome.get(), 15)
    finally:
        server.stop()
        await asyncio.wait_for(run, 20)
        row = await app.client().get(job_id)
        await app.aclose()
    assert row is not None
    assert row.params == {"before": True}, f"a stalled server's checkpoint was {seen}"
    assert seen == "refused"
