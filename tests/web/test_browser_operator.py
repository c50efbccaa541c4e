"""Browser tests of the operator's views in real Chromium: charts checked against the
jobs this test finished, jump to a job by id, the timeline, what each server runs,
and layouts that hold a 200-character name at desktop and phone width (no page wider
than the screen). Takes the screenshots charts.png, kinds.png, servers.png and
phone.png into $KILN_SCREENSHOTS when set (see tests/web/test_browser.py)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from kiln import Client
from kiln._model._job import AttemptError, JobResult, Outcome
from tests.stores.factories import server
from tests.support.web import TOKEN
from tests.web.live import LiveDashboard, serving

LONG_KIND = "billing." + "k" * 192  # 200 characters, the longest name kiln accepts
LONG_QUEUE = "q" * 200
PAGES = ["/", "/jobs", "/jobs?state=failed", "/queues", "/kinds", "/servers", "/runbooks",
         "/audit", "/audit?action=requeue&since=1h"]


@pytest.fixture
async def jobs(admin: Client) -> dict[str, Sequence[int]]:
    return await _seed(admin)


@pytest.fixture
async def live(store_url: str, jobs: dict[str, Sequence[int]]) -> AsyncIterator[LiveDashboard]:
    """Started after the seeding, so its first counts already hold every job."""
    async with serving(store_url, TOKEN) as dashboard:
        yield dashboard


async def _seed(admin: Client) -> dict[str, Sequence[int]]:
    """Five completed and two failed jobs of a 200-character kind in a 200-character
    queue, one job running on a registered server, one waiting."""
    ids = [await admin.enqueue(LONG_KIND, {"tenant": "t" * 200, "i": i}, queue=LONG_QUEUE,
                               max_attempts=1) for i in range(7)]
    await admin._store.server_register(server("worker-" + "w" * 120, {LONG_QUEUE: 4}))
    rows = await admin._store.job_claim(LONG_QUEUE, [LONG_KIND], 7, "worker-" + "w" * 120)
    results = []
    for i, r in enumerate(rows):
        failed = i >= 5
        results.append(JobResult(
            job_id=r.id, server_id=r.server_id or "", attempt=r.attempt,
            outcome=Outcome.FAILED if failed else Outcome.COMPLETED,
            error=AttemptError(r.attempt, time.time(), "E" * 300, "", r.server_id,
                               due_at=r.run_at.timestamp(),
                               started_at=r.attempted_at.timestamp() if r.attempted_at else None)
            if failed else None,
        ))
    await admin._store.job_results_apply(results)
    running = await admin.enqueue(LONG_KIND, {}, queue=LONG_QUEUE)
    await admin._store.job_claim(LONG_QUEUE, [LONG_KIND], 1, "worker-" + "w" * 120)
    waiting = await admin.enqueue("report.build", {}, queue="reports")
    return {"completed": ids[:5], "failed": ids[5:], "running": [running],
            "waiting": [waiting]}


async def _sign_in(page: Page, base: str) -> None:
    await page.goto(base + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")


async def _wider_than_the_screen(page: Page) -> int:
    return int(await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"))


async def _widest(page: Page) -> str:
    """The elements that reach past the screen's right edge, innermost first."""
    return str(await page.evaluate(
        """() => { const w = document.documentElement.clientWidth; const out = [];
        for (const el of document.querySelectorAll('body *')) {
          const r = el.getBoundingClientRect();
          if (r.right > w + 1 && !el.closest('pre')) out.push(
            el.tagName + '.' + el.className + ' ' + Math.round(r.right)); }
        return out.slice(0, 8); }"""))


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_operator_views_in_the_browser(
    browser: Browser, live: LiveDashboard, jobs: dict[str, Sequence[int]], tmp_path: Path
) -> None:
    shots = Path(os.environ.get("KILN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    await _sign_in(page, live.url)

    # the charts draw what the database holds: five completed, two failed this minute
    completed = await page.locator("#chart-completed svg").get_attribute("data-values")
    failed = await page.locator("#chart-failed svg").get_attribute("data-values")
    assert completed is not None and failed is not None
    assert sum(map(int, completed.split(","))) == 5 and sum(map(int, failed.split(","))) == 2
    await expect(page.locator("#chart-completed .total")).to_have_text("5 in the hour")
    await expect(page.locator(".card-completed .n")).to_have_text("5")  # the same jobs
    assert await page.locator("#chart-completed svg rect").count() == 60
    await page.screenshot(path=str(shots / "charts.png"), full_page=True)

    # jump to a job by id from any page's header
    await page.fill("#goto-id", str(jobs["failed"][0]))
    await page.press("#goto-id", "Enter")
    await expect(page.locator("h1")).to_contain_text(f"Job {jobs['failed'][0]}")
    timeline = page.locator("#timeline li")
    await expect(timeline).to_have_count(3)  # enqueued, attempt 1 (its error), failed
    await expect(timeline.nth(1)).to_contain_text("attempt 1")
    await expect(timeline.nth(1)).to_contain_text("EEEE")
    await expect(timeline.nth(2)).to_contain_text("failed")

    await page.goto(live.url + "/servers")
    running = page.locator("section.running table tbody tr")
    await expect(running).to_have_count(1)
    await expect(running.first).to_contain_text(str(jobs["running"][0]))
    await page.screenshot(path=str(shots / "servers.png"), full_page=True)

    await page.goto(live.url + "/kinds")
    row = page.locator("table.kinds-table tbody tr", has_text="report.build")
    await expect(row).to_contain_text("not declared")
    await page.screenshot(path=str(shots / "kinds.png"), full_page=True)

    job_pages = [f"/jobs/{jobs['failed'][0]}", f"/jobs/{jobs['running'][0]}"]
    for width, height in ((1280, 900), (390, 844)):  # a desktop, and a phone
        await page.set_viewport_size({"width": width, "height": height})
        for path in PAGES + job_pages:
            await page.goto(live.url + path)
            over = await _wider_than_the_screen(page)
            assert over <= 0, (f"{path} is {over}px wider than a {width}px screen: "
                               f"{await _widest(page)}")
    await page.goto(live.url + "/")
    await page.screenshot(path=str(shots / "phone.png"), full_page=True)
    assert re.search(r"Overview", await page.content())
