"""The dashboard inside a user's app (Mount), behind a prefix-stripping proxy, and over
an App (whose recurring jobs it lists); the cache that keeps counts cheap."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import kiln
from kiln import Client, ConfigError
from kiln.web import _source, create_app
from kiln.web._source import Cached
from tests.support.web import TOKEN, MakeHttp, csrf_of, fail_jobs


def _hrefs(page: str) -> list[str]:
    return re.findall(r'(?:href|action|src)="([^"]+)"', page)


async def _home(_request: object) -> PlainTextResponse:
    return PlainTextResponse("the user's own app")


async def test_mounted_inside_a_users_app(make_http: MakeHttp, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    outer = Starlette(routes=[Route("/", _home), Mount("/admin/kiln", app=create_app(client))])
    http = make_http(app=outer)
    assert (await http.get("/")).text == "the user's own app"
    page = await http.get("/admin/kiln/jobs?state=failed")
    assert page.status_code == 200
    links = [h for h in _hrefs(page.text) if h.startswith("/")]
    assert links and all(h.startswith("/admin/kiln/") for h in links), links
    assert http.cookies.jar and all(c.path == "/admin/kiln" for c in http.cookies.jar)
    response = await http.post(f"/admin/kiln/jobs/{job_id}/requeue",
                               data={"csrf": csrf_of(page.text)})
    assert response.status_code == 303
    assert response.headers["location"] == f"/admin/kiln/jobs/{job_id}?done=requeue&n=1"
    assert (await http.get("/admin/kiln/static/kiln.css")).status_code == 200


async def test_mounted_with_a_token(make_http: MakeHttp, client: Client) -> None:
    outer = Starlette(routes=[Mount("/kiln", app=create_app(client, token=TOKEN))])
    http = make_http(app=outer)
    refused = await http.get("/kiln/jobs?state=failed")
    assert refused.status_code == 401 and 'action="/kiln/login"' in refused.text
    assert (await http.get("/kiln/static/kiln.js")).status_code == 200
    assert (await http.get("/kiln/loginx")).status_code == 401
    signed_in = await http.post("/kiln/login", data={
        "token": TOKEN, "next": "/jobs?state=failed", "csrf": csrf_of(refused.text)})
    assert signed_in.headers["location"] == "/kiln/jobs?state=failed"
    assert (await http.get("/kiln/jobs?state=failed")).status_code == 200


async def test_root_path_behind_a_proxy(make_http: MakeHttp, client: Client) -> None:
    await client.enqueue("k", {}, queue="q")
    http = make_http(root_path="/ops/kiln")
    page = await http.get("/jobs")  # the proxy stripped /ops/kiln
    links = [h for h in _hrefs(page.text) if h.startswith("/")]
    assert links and all(h.startswith("/ops/kiln/") for h in links), links
    with pytest.raises(ConfigError):
        create_app(client, root_path="ops/")


async def test_over_an_app_with_recurring_jobs(store_url: str) -> None:
    app = kiln.App(store_url)
    app.schedule("nightly-report", "report.build", cron="0 3 * * *")
    app.schedule("heartbeat", "ping", every=30)
    await app.amigrate()
    await app.aenqueue("ping", {})
    dashboard = create_app(app)
    transport = httpx.ASGITransport(app=dashboard)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        page = (await http.get("/recurring")).text
        assert "nightly-report" in page and "0 3 * * *" in page and "every 30.0s" in page
        assert "ping" in (await http.get("/jobs")).text
    await app.client()._store.close()


async def test_cached_value_is_fetched_once_per_ttl_and_single_flight() -> None:
    calls = 0
    release = asyncio.Event()

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    cached = Cached(60.0, fetch)
    first = [asyncio.create_task(cached.get()) for _ in range(5)]
    await asyncio.sleep(0.01)
    release.set()
    assert await asyncio.gather(*first) == [1] * 5 and calls == 1
    assert await cached.get() == 1 and calls == 1  # fresh: no fetch
    cached.invalidate()
    assert await cached.get() == 2


class Clock:
    """Stands in for the time module in kiln.web._source."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now


async def test_expired_value_is_refreshed_in_the_background(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(_source, "time", clock)
    release = asyncio.Event()
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            await release.wait()
        return calls

    cached = Cached(5.0, fetch)
    assert await cached.get() == 1
    clock.now += 6  # expired, but less than twice the ttl old: served while refreshed
    assert await asyncio.wait_for(cached.get(), 1.0) == 1  # stale, refresh started
    assert (await asyncio.wait_for(cached.snapshot(), 1.0)).as_of == clock.time() - 6
    assert calls == 2  # one refresh at a time
    release.set()
    await asyncio.sleep(0.01)
    assert await cached.get() == 2
    cached.cancel()


async def test_after_an_idle_period_the_first_page_waits_for_fresh_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(_source, "time", clock)
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        return calls

    cached = Cached(5.0, fetch)
    assert await cached.get() == 1
    clock.now += 600  # nobody looked for ten minutes
    snap = await cached.snapshot()
    assert (snap.value, snap.as_of) == (2, clock.time())  # not the value from 600 s ago


async def test_a_refresh_started_before_invalidate_is_discarded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(_source, "time", clock)
    release = asyncio.Event()
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            await release.wait()  # the background refresh, slower than the action
        return calls

    cached = Cached(5.0, fetch)
    assert await cached.get() == 1
    clock.now += 6
    assert await cached.get() == 1  # starts refresh #2
    await asyncio.sleep(0.01)  # which is now waiting in fetch
    cached.invalidate()  # an action changed the data
    assert await asyncio.wait_for(cached.get(), 1.0) == 3  # a fetch started after it
    release.set()
    await asyncio.sleep(0.01)
    assert cached._value == 3  # the older fetch #2 did not overwrite it
    cached.cancel()
