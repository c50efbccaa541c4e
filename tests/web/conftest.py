"""Web dashboard fixtures: a kiln Client on each store, the dashboard over it, and an
HTTP client that speaks to the ASGI app in-process (httpx ASGITransport)."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from starlette.applications import Starlette

from kiln import Client
from kiln._job import AttemptError, JobResult, Outcome
from kiln.stores import Store, store_from_url
from kiln.web import create_app
from tests.web.live import CHROMIUM_ARGS, LiveDashboard, chromium_or_skip

if TYPE_CHECKING:
    from playwright.async_api import Browser

TOKEN = "test-token-0123456789abcdef"
BASE_URL = "http://127.0.0.1"  # a name the dashboard answers to: it refuses other Hosts
CSRF_INPUT = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
TRACEBACK = 'Traceback (most recent call last):\n  File "jobs.py", line 3, in run\n'


@pytest.fixture
def client(store: Store) -> Client:
    return Client(store)


MakeHttp = Callable[..., httpx.AsyncClient]


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


HIDDEN = re.compile(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">')


def hidden_fields(page: str) -> dict[str, str]:
    """The hidden fields of a page's forms (a confirmation's filter and bounds)."""
    return {name: html.unescape(value) for name, value in HIDDEN.findall(page)}


def csrf_of(html: str) -> str:
    match = CSRF_INPUT.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def post_form(http: httpx.AsyncClient, page: str, action: str,
                    data: dict[str, Any]) -> httpx.Response:
    """Load ``page`` (for its CSRF token and cookie), then POST ``data`` to ``action``.

    A list value posts the field once per item (the job selection)."""
    loaded = await http.get(page)
    assert loaded.status_code == 200, loaded.text
    return await http.post(action, data={**data, "csrf": csrf_of(loaded.text)})


async def fail_jobs(
    client: Client, n: int, *, kind: str = "email.send", queue: str = "mail",
    error: str = "SMTP timeout", args: Any = None, **options: Any,
) -> list[int]:
    """Enqueue ``n`` jobs and drive them to failed through the store's own calls."""
    ids = [await client.enqueue(kind, args if args is not None else {"i": i}, queue=queue,
                                **options) for i in range(n)]
    rows = await client._store.job_claim(queue, [kind], n, "web-test-server")
    assert sorted(r.id for r in rows) == sorted(ids), "the queue held other available jobs"
    results = [
        JobResult(job_id=r.id, server_id="web-test-server", attempt=r.attempt,
                  outcome=Outcome.FAILED,
                  error=AttemptError(r.attempt, time.time(), error, TRACEBACK + error,
                                     "web-test-server"))
        for r in rows
    ]
    applied = await client._store.job_results_apply(results)
    assert applied.applied == n
    return [int(i) for i in ids]


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
    dashboard = LiveDashboard(store_url, token=TOKEN)
    await asyncio.to_thread(dashboard.start)
    try:
        yield dashboard
    finally:
        await asyncio.to_thread(dashboard.stop)
