"""Web dashboard fixtures: a kiln Client on each store, the dashboard over it, and an
HTTP client that speaks to the ASGI app in-process (httpx ASGITransport)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from starlette.applications import Starlette

from kiln import Client
from kiln.stores import Store, store_from_url
from kiln.web import create_app
from tests.support.web import (
    BASE_URL,
    TOKEN,
    MakeHttp,
)
from tests.web.live import CHROMIUM_ARGS, LiveDashboard, chromium_or_skip, serving

if TYPE_CHECKING:
    from playwright.async_api import Browser


@pytest.fixture
def client(store: Store) -> Client:
    return Client(store)


@pytest.fixture
async def make_http(client: Client) -> AsyncIterator[MakeHttp]:
    """``make_http(**create_app_options)``: an HTTP client for a fresh dashboard."""
    opened: list[httpx.AsyncClient] = []

    def make(target: Any = None, app: Starlette | None = None, **options: Any) -> httpx.AsyncClient:
        asgi = app if app is not None else create_app(target or client, **options)
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=asgi), base_url=BASE_URL
        )
        opened.append(http)
        return http

    yield make
    for http in opened:
        await http.aclose()


@pytest.fixture
async def http(make_http: MakeHttp) -> httpx.AsyncClient:
    return make_http()


# the browser tests' fixtures ------------------------------------------------------------
@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium: Debian's package, driven by Playwright."""
    from playwright.async_api import async_playwright

    path = chromium_or_skip()
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def admin(store_url: str) -> AsyncIterator[Client]:
    """A Client of its own on a migrated store, for the test to seed and check."""
    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    try:
        yield Client(store)
    finally:
        await store.close()


@pytest.fixture
async def live(store_url: str, admin: Client) -> AsyncIterator[LiveDashboard]:
    """The dashboard served by uvicorn on a free loopback port, behind TOKEN."""
    async with serving(store_url, TOKEN) as dashboard:
        yield dashboard
