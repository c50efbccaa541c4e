"""Serve an ASGI app in-process as a server would: its lifespan (with lifespan state
handed to every request), and an httpx client that talks to it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

BASE_URL = "http://127.0.0.1"  # a name the dashboard answers to


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    state: dict[str, Any] = {}
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": state}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started

    async def with_state(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, "state": dict(state)}
        await app(scope, receive, send)

    transport = httpx.ASGITransport(app=with_state)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
            yield http
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        stopped = await outbox.get()
        await task
        assert stopped["type"] == "lifespan.shutdown.complete", stopped
