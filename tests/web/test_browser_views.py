"""Issue 44's new views in real Chromium, at a desktop's and a phone's width, light and
dark: the Failed tab's error groups and args, the fleet (a quiet server, a paused
queue) and the charts, with numbers checked against the jobs this test made; at 390 px
no page is wider than the screen; the dark theme follows prefers-color-scheme. Takes
the screenshots error-groups.png, fleet.png, dark.png and phone-failed.png into
$KILN_SCREENSHOTS when set (see tests/web/test_browser.py). SQLite only: the pages'
layout is above the store."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from kiln import Client
from kiln._model._job import JobResult, Outcome, ServerInfo
from tests.support.web import TOKEN, fail_jobs
from tests.web.live import LiveDashboard, serving

PAGES = ["/", "/jobs", "/jobs?state=failed", "/servers", "/charts", "/charts?by=kind&range=7d",
         "/queues", "/kinds"]


async def _seed(admin: Client) -> dict[str, list[int]]:
    smtp = await fail_jobs(admin, 4, error="ConnectionError: smtp timeout talking to "
                           "mx1.mail.example.com:25 after 30 s", queue="mail",
                           args={"customer": "c-1042", "invoice": "INV-2026-00017",
                                 "to": "billing@customer.example.com"},
                           metadata={"tenant": "acme-corporation", "region": "eu-west-1"})
    bad = await fail_jobs(admin, 2, error="ValueError: bad address 'x@'", queue="mail",
                          args={"customer": "c-7", "to": "x@"})
    for i in range(3):
        await admin._store.server_register(ServerInfo(
            id=f"worker-{i}.prod.internal-{'a' * 20}", host=f"vm-{i}", pid=1000 + i,
            queues={"mail": 8, "reports": 4, "billing-" + "q" * 40: 2},
            kinds=["email.send"], version="0.1.0", started_at=datetime.now(UTC)))
    done = [int(await admin.enqueue("report.build", {"i": i}, queue="reports"))
            for i in range(6)]
    rows = await admin._store.job_claim("reports", ["report.build"], 6, "worker-0.prod.internal-"
                                        + "a" * 20)
    await admin._store.job_results_apply([JobResult(
        job_id=r.id, server_id=r.server_id or "", attempt=r.attempt,
        outcome=Outcome.COMPLETED) for r in rows])
    await admin.pause_queue("reports", actor="alice")
    await admin.set_concurrency("mail", 0, server="worker-2.prod.internal-" + "a" * 20,
                                actor="bob")
    for q in ("mail", "reports", "billing-" + "q" * 40):
        await admin.set_concurrency(q, 0, server="worker-1.prod.internal-" + "a" * 20,
                                    actor="bob")  # quiet
    return {"smtp": smtp, "bad": bad, "done": done}


@pytest.fixture
async def seeded(admin: Client) -> dict[str, list[int]]:
    return await _seed(admin)


@pytest.fixture
async def live(store_url: str, seeded: dict[str, list[int]]) -> AsyncIterator[LiveDashboard]:
    async with serving(store_url, TOKEN) as dashboard:
        yield dashboard


async def _sign_in(page: Page, base: str) -> None:
    await page.goto(base + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")


async def _overflow(page: Page) -> str:
    """The elements that reach past the screen's right edge (outside a scroller)."""
    return str(await page.evaluate(
        """() => { const w = document.documentElement.clientWidth; const out = [];
        for (const el of document.querySelectorAll('body *')) {
          const r = el.getBoundingClientRect();
          if (r.right > w + 1 && !el.closest('pre, .table-wrap')) out.push(
            el.tagName + '.' + el.className + ' ' + Math.round(r.right)); }
        return out.slice(0, 8); }"""))


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_new_views_on_a_desktop_a_phone_and_in_the_dark(
    browser: Browser, live: LiveDashboard, seeded: dict[str, list[int]], tmp_path: Path
) -> None:
    shots = Path(os.environ.get("KILN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    context = await browser.new_context(viewport={"width": 1280, "height": 900},
                                        color_scheme="light")
    page = await context.new_page()
    await _sign_in(page, live.url)

    # the overview: the paused queue is a check and a row, with who paused it
    await expect(page.locator(".check-warn", has_text="paused queues")).to_contain_text(
        "1 paused: reports")
    await expect(page.locator("#controlled tr.controlled.paused")).to_contain_text("by alice")

    # the Failed tab: two groups with their counts, args and metadata in the rows
    await page.goto(live.url + "/jobs?state=failed")
    groups = page.locator("tr.error-group")
    await expect(groups).to_have_count(2)
    await expect(groups.nth(0).locator("td.num")).to_have_text("4")
    await expect(groups.nth(0)).to_contain_text("ConnectionError")
    await expect(groups.nth(1).locator("td.num")).to_have_text("2")
    await expect(page.locator("table.jobs code.args").first).to_contain_text('"customer"')
    await page.screenshot(path=str(shots / "error-groups.png"), full_page=True)
    await groups.nth(1).locator("a.group-filter").click()
    await expect(page.locator('table.jobs input[name="ids"]')).to_have_count(2)
    ids = {int(v) for v in await page.locator('table.jobs input[name="ids"]').evaluate_all(
        "bs => bs.map(b => b.value)")}
    assert ids == set(seeded["bad"])

    # the fleet: per server its running jobs and concurrency, the quiet one marked
    await page.goto(live.url + "/servers")
    quiet = page.locator("tr.server-row", has=page.locator(".quiet"))
    await expect(quiet).to_have_count(1)
    await expect(quiet).to_contain_text("worker-1")
    await expect(quiet.locator(".concurrency")).to_contain_text("0 of 14")
    partly = page.locator("tr.server-row", has_text="worker-2")
    await expect(partly.locator(".concurrency")).to_contain_text("6 of 14")  # mail at 0
    await expect(partly.locator('button[value="quiet"]')).to_have_count(1)
    await page.screenshot(path=str(shots / "fleet.png"), full_page=True)

    # the charts: the six completed reports
    await page.goto(live.url + "/charts")
    await expect(page.locator('#timings tr[data-name="reports"] .completed')).to_have_text("6")
    await expect(page.locator('#timings tr[data-name="mail"] .failed')).to_have_text("6")

    # a phone: nothing wider than the screen, on every page
    await page.set_viewport_size({"width": 390, "height": 844})
    for path in PAGES:
        await page.goto(live.url + path)
        over = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert over <= 0, f"{path} is {over}px wider than a 390px screen: {await _overflow(page)}"
    await page.goto(live.url + "/jobs?state=failed")
    await page.screenshot(path=str(shots / "phone-failed.png"), full_page=False)

    # dark: the system's setting picks the theme, light stays light
    light_bg = await page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    await page.emulate_media(color_scheme="dark")
    dark_bg = await page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    assert light_bg != dark_bg
    rgb = [int(v) for v in re.findall(r"\d+", dark_bg)[:3]]
    assert sum(rgb) < 3 * 60, dark_bg  # dark
    text = await page.evaluate("getComputedStyle(document.querySelector('h1')).color")
    assert sum(int(v) for v in re.findall(r"\d+", text)[:3]) > 3 * 180, text  # light text
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.goto(live.url + "/")
    await page.screenshot(path=str(shots / "dark.png"), full_page=True)
