"""Issue 44, control of the page, in real Chromium: times read relative ("3 min ago",
"in 1 h") with the absolute time on hover, in UTC or the browser's local time by the
operator's choice, kept per browser in localStorage. Checked against the jobs this test
made: a job due in two hours and one that failed now. SQLite only: the page's
behaviour is above the store."""

from __future__ import annotations

import re
from datetime import UTC, timedelta

import pytest
from playwright.async_api import Browser, expect

from kiln import Client
from tests.support.web import TOKEN, fail_jobs
from tests.web.live import LiveDashboard


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_relative_times_in_utc_or_local_time(
    browser: Browser, live: LiveDashboard, admin: Client
) -> None:
    later = await admin.enqueue("report.build", {}, queue="reports", delay=7200)
    [failed] = await fail_jobs(admin, 1)
    job = await admin.get(later)
    assert job is not None
    due = job.run_at.astimezone(UTC)
    # a browser five and a half hours east of UTC, so local and UTC differ
    context = await browser.new_context(timezone_id="Asia/Kolkata")
    page = await context.new_page()
    await page.goto(live.url + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")

    await page.goto(f"{live.url}/jobs?queue=reports")
    cell = page.locator("table.jobs tbody tr time.rel").first
    await expect(cell).to_have_text("in 1 h")  # due in 7,200 s: a whole hour and more
    assert await cell.get_attribute("title") == due.strftime("%Y-%m-%d %H:%M:%S UTC")
    await page.goto(f"{live.url}/jobs?state=failed")
    await expect(page.locator("table.jobs tbody tr time.rel").first).to_have_text(
        re.compile(r"^(just now|\d+ s ago)$"))

    # local time: the title carries the browser's offset, and the choice is kept
    select = page.locator("[data-time-zone]")
    await expect(select).to_have_value("utc")
    await select.select_option("local")
    assert await page.evaluate("localStorage.getItem('kiln.tz')") == "local"
    await page.goto(f"{live.url}/jobs?queue=reports")
    await expect(page.locator("[data-time-zone]")).to_have_value("local")
    local = due + timedelta(hours=5, minutes=30)
    await expect(page.locator("table.jobs tbody tr time.rel").first).to_have_attribute(
        "title", local.strftime("%Y-%m-%d %H:%M:%S UTC+05:30"))
    # the counts' "as of" clock follows the choice too: no "UTC" once local
    as_of = page.locator(".tab-age .as-of time")
    await expect(as_of).not_to_contain_text("UTC")
    await page.locator("[data-time-zone]").select_option("utc")
    await expect(as_of).to_contain_text("UTC")
    await page.goto(f"{live.url}/jobs/{failed}")
    await expect(page.locator("[data-time-zone]")).to_have_value("utc")
