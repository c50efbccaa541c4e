"""docs/guide.md, "Stored results": its three blocks run as written, on every store."""

from __future__ import annotations

import ast
import asyncio
from typing import Any

import kiln
from tests.integration.inprocess import Running, all_completed, config, open_store
from tests.support.docblocks import blocks_under_test
from tests.support.waits import wait_for


async def run_block(block: str, namespace: dict[str, Any]) -> None:
    """Run ``block`` as written, awaits at the top level included (async code)."""
    code = compile(block, "guide.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    outcome = eval(code, namespace)
    if asyncio.iscoroutine(outcome):
        await outcome


async def test_the_guides_results_blocks(store_url: str) -> None:
    handlers, producer, reader = blocks_under_test("guide.md", __file__)[:3]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url}
    exec(handlers, namespace)
    app: kiln.App = namespace["app"]
    store = await open_store(store_url)  # migrates
    try:
        await run_block(producer, namespace)
        ids = [*namespace["parts"], namespace["total"], namespace["export"]]
        running = await Running(app.server(config=config())).started()
        try:
            await wait_for(lambda: all_completed(store.job_get, ids), 15,
                           "the guide's jobs to complete")
        finally:
            await running.stop()
        await run_block(reader, namespace)
    finally:
        await store.close()
        await app.aclose()
        app.close()
