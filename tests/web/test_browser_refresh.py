"""Issue 44 N3 in real Chromium: auto-refresh keeps a traceback the operator opened
(or closed) as it was, never runs while text is selected (so copying a traceback does
not race a timer), and its interval is the operator's choice (off, 2, 5, 15, 60 s, or
the dashboard's own), kept per browser in localStorage. A finished job's page does not
refresh at all. SQLite only: the page's behaviour is above the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, expect

from kiln import Client
from kiln._model._job import AttemptError, JobFilter, JobResult, JobState, Outcome
from tests.support.web import TOKEN, TRACEBACK, fail_jobs
from tests.web.live import LiveDashboard

REFRESH = 0.4  # the dashboard's own interval, seconds
MARK = "document.getElementById('main').dataset.old = '1'"
REPLACED = "() => !document.getElementById('main').dataset.old"


@pytest.fixture
async def live_fast(store_url: str, admin: Client) -> AsyncIterator[LiveDashboard]:
    dashboard = LiveDashboard(store_url, token=TOKEN, refresh_interval=REFRESH)
    await asyncio.to_thread(dashboard.start)
    try:
        yield dashboard
    finally:
        await asyncio.to_thread(dashboard.stop)


async def _retrying(admin: Client) -> int:
    """A job that failed twice and waits for its third attempt: its page refreshes."""
    job_id = await admin.enqueue("email.send", {}, queue="mail", max_attempts=5)
    for attempt in (1, 2):
        if attempt > 1:  # due now, and released to its queue as the leader would
            await admin._store.jobs_make_due(JobFilter(ids=(job_id,)))
            await admin._store.jobs_release_due()
        [row] = await admin._store.job_claim("mail", ["email.send"], 1, "srv")
        error = AttemptError(attempt, time.time(), f"SMTP timeout {attempt}",
                             TRACEBACK + f"attempt {attempt} raised", "srv")
        applied = await admin._store.job_results_apply([JobResult(
            row.id, "srv", row.attempt, Outcome.RETRY, error=error, run_at_delay=3600)])
        assert applied.applied == 1
    job = await admin.get(job_id)
    assert job is not None and job.state is JobState.SCHEDULED and len(job.errors) == 2
    return int(job_id)


async def _refreshed(page: Page) -> None:
    await page.evaluate(MARK)
    await page.wait_for_function(REPLACED, timeout=15_000)


async def _still(page: Page, seconds: float) -> None:
    """No refresh for ``seconds`` (several intervals): a bounded negative check."""
    await page.evaluate(MARK)
    await asyncio.sleep(seconds)
    assert not await page.evaluate(REPLACED), "the page refreshed"


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_refresh_keeps_what_the_operator_reads(
    browser: Browser, live_fast: LiveDashboard, admin: Client
) -> None:
    job_id = await _retrying(admin)
    [finished] = await fail_jobs(admin, 1, queue="other")
    page = await (await browser.new_context()).new_page()
    await page.goto(live_fast.url + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")
    await page.goto(f"{live_fast.url}/jobs/{job_id}")
    newest, oldest = page.locator("#traceback-2"), page.locator("#traceback-1")
    assert await newest.get_attribute("open") is not None and await oldest.get_attribute(
        "open") is None  # as served: the newest open

    # the operator opens the older traceback and closes the newer: kept over refreshes
    await page.click("#traceback-1 summary")
    await page.click("#traceback-2 summary")
    for _ in range(2):
        await _refreshed(page)
    assert await page.evaluate("document.getElementById('traceback-1').open") is True
    assert await page.evaluate("document.getElementById('traceback-2').open") is False

    # selecting text (to copy it) holds the refresh until the selection ends
    await page.evaluate("""() => { const r = document.createRange();
        r.selectNodeContents(document.querySelector('#traceback-1 pre'));
        const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); }""")
    await _still(page, 8 * REFRESH)
    assert "attempt 1 raised" in await page.evaluate("window.getSelection().toString()")
    await page.evaluate("window.getSelection().removeAllRanges()")
    await page.wait_for_function(REPLACED, timeout=15_000)

    # the interval: its choices, and "off" kept by this browser across pages
    select = page.locator("[data-refresh-every]")
    options = await select.locator("option").evaluate_all("os => os.map(o => o.value)")
    assert options == ["off", "0.4", "2", "5", "15", "60"]
    assert await select.input_value() == "0.4"
    await select.select_option("off")
    assert await page.evaluate("localStorage.getItem('kiln.refresh')") == "off"
    await _still(page, 5 * REFRESH)
    await page.goto(f"{live_fast.url}/jobs")
    await expect(page.locator("[data-refresh-every]")).to_have_value("off")
    await _still(page, 5 * REFRESH)
    await page.locator("[data-refresh-every]").select_option("0.4")
    await _refreshed(page)
    await page.locator("[data-refresh-every]").select_option("15")
    await page.reload()
    await expect(page.locator("[data-refresh-every]")).to_have_value("15")

    # a finished job's page stays still
    await page.goto(f"{live_fast.url}/jobs/{finished}")
    assert await page.locator("body").get_attribute("data-refresh") is None
