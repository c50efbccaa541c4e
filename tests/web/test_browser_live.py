"""Browser test (headless Chromium): a live page whose auto-refresh fails says so.

Issue 21, defect 11: an auto-refresh that got a 503, a 401 or no answer at all used to
keep the old page silently, so "database ok" stayed green through an outage. Here the
job store really fails (its jobs table is renamed away under the running dashboard), the
session really ends (the browser drops its cookie) and the dashboard really stops; each
time the page must show the "Not live" banner, and lose it once refreshes succeed again.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import psycopg
import pytest
from playwright.async_api import Browser, Page, expect

from kiln import Client
from tests.plugins.databases import mysql_connect
from tests.support.web import fail_jobs, sign_in
from tests.web.live import LiveDashboard

REFRESH = 0.4  # seconds between auto-refreshes


def _rename_jobs_table(url: str, old: str, new: str) -> None:
    """A store outage the dashboard cannot paper over: its jobs table disappears."""
    sql = f"ALTER TABLE {old} RENAME TO {new}"
    if url.startswith("sqlite"):
        with sqlite3.connect(urlsplit(url).path) as lite:
            lite.execute(sql)
    elif url.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)
    else:
        conn = mysql_connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()


@pytest.fixture
async def live_fast(store_url: str, admin: Client) -> AsyncIterator[LiveDashboard]:
    from tests.support.web import TOKEN

    dashboard = LiveDashboard(store_url, token=TOKEN, count_ttl=0.2, refresh_interval=REFRESH)
    await asyncio.to_thread(dashboard.start)
    try:
        yield dashboard
    finally:
        await asyncio.to_thread(dashboard.stop)


async def _live(page: Page) -> None:
    await expect(page.locator("#refresh-failed")).to_be_hidden(timeout=15_000)
    await expect(page.locator("body")).not_to_have_class("stale")


async def _not_live(page: Page, reason: str) -> None:
    banner = page.locator("#refresh-failed")
    await expect(banner).to_be_visible(timeout=15_000)
    await expect(banner).to_contain_text(reason)
    await expect(banner).to_contain_text("may be out of date")
    await expect(page.locator("body")).to_have_class("stale")


async def test_refresh_failure_shows_a_banner(
    browser: Browser, live_fast: LiveDashboard, admin: Client, store_url: str,
) -> None:
    await fail_jobs(admin, 2)
    page = await browser.new_page(viewport={"width": 1100, "height": 800})
    await sign_in(page, live_fast.url)
    await expect(page.locator(".card-failed .n")).to_have_text("2")
    await _live(page)

    await asyncio.to_thread(_rename_jobs_table, store_url, "kiln_jobs", "kiln_jobs_away")
    try:
        await _not_live(page, "the job store did not answer (HTTP 503)")
        await expect(page.locator(".card-failed .n")).to_have_text("2")  # kept, but marked
    finally:
        await asyncio.to_thread(_rename_jobs_table, store_url, "kiln_jobs_away", "kiln_jobs")
    await fail_jobs(admin, 1, queue="other")
    await _live(page)
    await expect(page.locator(".card-failed .n")).to_have_text("3", timeout=15_000)

    await page.goto(live_fast.url + "/jobs?state=failed")  # a live job list
    await _live(page)
    await page.context.clear_cookies()  # the session ends
    await _not_live(page, "no longer signed in (HTTP 401)")

    await sign_in(page, live_fast.url)
    await _live(page)
    await asyncio.to_thread(live_fast.stop)  # the dashboard itself goes away
    await _not_live(page, "did not answer")
