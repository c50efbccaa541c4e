"""Issue 44, "is it slow, and since when", in real Chromium: the charts page shows per
kind and per queue the jobs a real server ran here (completed, failed, per minute),
run-time and wait percentiles as upper bounds of their class, and bars over a time
axis for the range picked (1 h, 6 h, 24 h, 7 d), from the database; /api/timings has
the same numbers. SQLite only: the grouped read is checked on every store by
tests/stores/test_conformance_timings.py."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, expect

import kiln
from kiln import Client
from tests.integration.inprocess import Running, config
from tests.support.waits import wait_for
from tests.support.web import TOKEN
from tests.web.live import LiveDashboard, serving

SLOW = 0.25  # seconds each "report.slow" job runs


@pytest.fixture
async def ran(store_url: str, admin: Client) -> dict[str, list[int]]:
    """17 jobs a real server ran: 10 fast and 5 slow ones completed, 2 failed."""
    app = kiln.App(store_url)

    @app.job("report.fast", queue="reports")
    async def fast(job: kiln.Job) -> None:
        pass

    @app.job("report.slow", queue="reports")
    async def slow(job: kiln.Job) -> None:
        await asyncio.sleep(SLOW)

    @app.job("mail.boom", queue="mail", max_attempts=1)
    async def boom(job: kiln.Job) -> None:
        raise RuntimeError("boom")

    ids = {kind: [int(await admin.enqueue(kind, {}, queue=queue)) for _ in range(n)]
           for kind, queue, n in (("report.fast", "reports", 10), ("report.slow", "reports", 5),
                                  ("mail.boom", "mail", 2))}
    running = await Running(app.server({"reports": 10, "mail": 2}, config())).started()
    try:
        async def finished() -> bool:
            rows = [await admin.get(i) for group in ids.values() for i in group]
            return all(r is not None and r.finished_at is not None for r in rows)

        await wait_for(finished, 15, "the 17 jobs to finish")
    finally:
        await running.stop()
    return ids


@pytest.fixture
async def live(store_url: str, ran: dict[str, list[int]]) -> AsyncIterator[LiveDashboard]:
    async with serving(store_url, TOKEN) as dashboard:
        yield dashboard


def _seconds(text: str) -> float:
    match = re.fullmatch(r"< ([0-9.]+)(ms|s|min|h)", text.strip())
    assert match, text
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "min": 60, "h": 3600}[match.group(2)]


async def _sum(page: object, chart: str) -> int:
    values = await page.locator(f"#chart-{chart} svg").get_attribute("data-values")  # type: ignore[attr-defined]
    return int(sum(float(v) for v in values.split(",")))


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_charts_per_kind_and_queue_over_a_range(
    browser: Browser, live: LiveDashboard, tmp_path: Path
) -> None:
    shots = Path(os.environ.get("KILN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await page.goto(live.url + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await page.click('header nav a:has-text("Charts")')
    await expect(page.locator("h1")).to_have_text("Charts")

    # per queue (the default): reports ran 15, mail failed 2
    rows = page.locator("#timings tbody tr")
    await expect(rows).to_have_count(2)
    reports = page.locator('#timings tr[data-name="reports"]')
    await expect(reports.locator(".completed")).to_have_text("15")
    await expect(reports.locator(".failed")).to_have_text("0")
    await expect(page.locator('#timings tr[data-name="mail"] .failed')).to_have_text("2")
    await expect(reports.locator(".per-minute")).to_have_text("0.25")  # 15 in 60 minutes
    assert await _sum(page, "throughput") == 17 and await _sum(page, "failed") == 2
    ticks = page.locator("#chart-throughput .x-axis time")
    await expect(ticks).to_have_count(6)  # every 10 minutes of the hour
    assert re.fullmatch(r"\d\d:\d\d", await ticks.first.inner_text())

    # per kind: the slow kind's run time is above its sleep, the fast kind's below it
    await page.click('nav.tabs a:has-text("by kind")')
    slow = page.locator('#timings tr[data-name="report.slow"]')
    fast = page.locator('#timings tr[data-name="report.fast"]')
    await expect(slow.locator(".completed")).to_have_text("5")
    await expect(fast.locator(".completed")).to_have_text("10")
    slow_p50 = _seconds(await slow.locator(".run").first.inner_text())
    fast_p50 = _seconds(await fast.locator(".run").first.inner_text())
    assert SLOW < slow_p50 <= 5.0 and fast_p50 <= SLOW, (slow_p50, fast_p50)
    waits = [_seconds(t) for t in await slow.locator(".wait").all_inner_texts()]
    assert waits == sorted(waits) and waits[-1] <= 15.0  # waited at most the test's time

    # one kind's charts: only its jobs; the run p95 bar of the minute they finished in
    # (on the clock's minutes: this one or, just past a minute, the one before) is its p95
    await slow.locator("a").click()
    await expect(page.locator("h2 code")).to_have_text("report.slow")
    assert await _sum(page, "throughput") == 5
    run = await page.locator("#chart-run svg").get_attribute("data-values")
    assert run is not None
    bars = [float(v) for v in run.split(",")]
    assert bars[-1] > SLOW or (bars[-1] == 0 and bars[-2] > SLOW), bars[-3:]
    await page.screenshot(path=str(shots / "timings.png"), full_page=True)

    # a week: 84 two-hour bars, ticks that name the day; the same jobs
    await page.click('nav.tabs a:has-text("7d")')
    await expect(page.locator("#chart-throughput svg rect")).to_have_count(84)
    assert await _sum(page, "throughput") == 5
    assert re.fullmatch(r"(Sun|Mon|Tue|Wed|Thu|Fri|Sat) \d\d:\d\d",
                        await page.locator("#chart-throughput .x-axis time").first.inner_text())

    # the API has the same numbers
    cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
    async with httpx.AsyncClient(base_url=live.url, cookies=cookies) as http:
        data = (await http.get("/api/timings?range=6h&by=kind")).json()
        assert (await http.get("/api/timings?range=2h")).status_code == 400
    kinds = {g["name"]: g for g in data["groups"]}
    assert (kinds["report.fast"]["completed"], kinds["report.slow"]["completed"],
            kinds["mail.boom"]["failed"]) == (10, 5, 2)
    assert kinds["report.slow"]["run_seconds"]["p50"] == slow_p50
    assert sum(data["series"]["finished"]) == 17 and len(data["series"]["finished"]) == 72
