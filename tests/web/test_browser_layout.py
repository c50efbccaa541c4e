"""Issue 44 N5 in real Chromium: job ids, state badges and numbers never break across
lines, at desktop and phone width, even with a 200-character kind and queue in the
same table (the seeding of tests/web/test_browser_operator.py). Measured: each one is
a single line box no taller than one line of its text."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.support.web import TOKEN
from tests.web.live import LiveDashboard
from tests.web.test_browser_operator import jobs, live  # noqa: F401 (the fixtures)

PAGES = ["/jobs", "/jobs?state=failed", "/jobs?state=completed", "/servers", "/"]
# the line boxes of each one's text: distinct tops of its range's rectangles
BROKEN = """() => [...document.querySelectorAll('a.job-id, .state, .badge, td.num, .pair .n')]
  .map(el => { const range = document.createRange(); range.selectNodeContents(el);
    const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                         .map(r => Math.round(r.top)));
    const r = range.getBoundingClientRect();
    return {text: el.textContent, lines: tops.size, height: Math.round(r.height),
            limit: Math.round(parseFloat(getComputedStyle(el).fontSize) * 2.2)}; })
  .filter(m => m.text.trim() && (m.lines > 1 || m.height > m.limit))"""


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_ids_and_badges_stay_on_one_line(browser: Browser,
                                               live: LiveDashboard) -> None:  # noqa: F811
    for width, height in ((1280, 900), (390, 844)):
        page = await browser.new_page(viewport={"width": width, "height": height})
        await page.goto(live.url + "/")
        await page.fill('input[name="token"]', TOKEN)
        await page.click('form.login button[type="submit"]')
        await expect(page.locator("h1")).to_have_text("Overview")
        for path in PAGES:
            await page.goto(live.url + path)
            measured = await page.locator("a.job-id, .state").count()
            assert measured or path == "/", path
            broken = await page.evaluate(BROKEN)
            assert broken == [], (width, path, broken[:5])
        await page.close()
