"""kiln in a Starlette application: the client's lifespan, the dashboard behind the
application's own authentication.

``lifespan(jobs)`` opens the async client of the serving event loop at start-up (so
the first request does not pay for the connection) and closes it at shutdown.
``guarded(dashboard, user)`` is an ASGI app to ``Mount``: every request first goes to
``user(request)``, the host application's check, which returns who is signed in (a
name or a user object), ``None`` to refuse with a 401, or raises (an HTTPException of
its own, say). The dashboard then treats that user as signed in.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kiln._app import App
from kiln._client._client import Client
from kiln.contrib._identity import with_identity

Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[Any]]
UserCheck = Callable[[Request], Awaitable[Any]]


def lifespan(jobs: App, inner: Lifespan | None = None) -> Lifespan:
    """A lifespan for ``Starlette(lifespan=...)`` / ``FastAPI(lifespan=...)``: opens
    ``jobs``' async client, runs ``inner`` (your own lifespan) inside, closes the
    client. The lifespan state gets ``kiln`` (the Client): ``request.state.kiln``."""

    @contextlib.asynccontextmanager
    async def run(host: Any) -> AsyncIterator[dict[str, Any]]:
        client = await open_client(jobs)
        try:
            state: dict[str, Any] = {"kiln": client}
            if inner is None:
                yield state
            else:
                async with inner(host) as more:
                    yield {**(more or {}), **state}
        finally:
            await jobs.aclose()

    return run


async def open_client(jobs: App) -> Client:
    """The running loop's client of ``jobs``, its store open."""
    client = jobs.client()
    await client.open()
    return client


def guarded(dashboard: ASGIApp, user: UserCheck) -> ASGIApp:
    """``dashboard`` (``kiln.web.create_app(...)``) behind ``user``, the host's check."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await dashboard(scope, receive, send)
            return
        who = await user(Request(scope, receive))
        if who is None or who is False:
            await PlainTextResponse("Not signed in", status_code=401)(scope, receive, send)
            return
        await dashboard(with_identity(dict(scope), who), receive, send)

    return app
