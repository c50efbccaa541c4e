"""Issue 44 N2 in real Chromium: between the confirmation ("Delete 2 jobs") and the
click, a running job fails into the set; the click deletes nothing and says "The set
changed: 3 now match", and the fresh confirmation then deletes the 3 it shows.

Runs on SQLite only (the stores' side is tests/web/test_bulk_races.py, on all three)."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from kiln import Client
from tests.support.web import TOKEN, fail_jobs, fail_running, running_job
from tests.web.live import LiveDashboard


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_a_state_change_between_confirm_and_act_is_refused(
    browser: Browser, live: LiveDashboard, admin: Client
) -> None:
    runner = await running_job(admin)
    shown = await fail_jobs(admin, 2, queue="race", kind="race.fail")
    page = await (await browser.new_context()).new_page()
    await page.goto(live.url + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('form.login button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")
    await page.goto(live.url + "/jobs?queue=race")
    await page.click("#delete-all")
    await expect(page.locator("#confirm-all")).to_have_text("Delete 2 jobs")
    await fail_running(admin, runner)  # while the operator reads the confirmation
    await page.click("#confirm-all")
    await expect(page.locator("#set-changed")).to_contain_text(
        "The set changed: 3 now match (this page showed 2). Nothing was deleted")
    assert None not in [await admin.get(i) for i in [runner, *shown]]
    await expect(page.locator("#confirm-all")).to_have_text("Delete 3 jobs")
    await page.click("#confirm-all")
    await expect(page.locator(".flash")).to_contain_text("3")
    assert [await admin.get(i) for i in [runner, *shown]] == [None] * 3
