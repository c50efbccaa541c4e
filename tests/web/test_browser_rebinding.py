"""DNS rebinding and cross-origin forms in a real Chromium (issue 21, defect 1).

Chromium resolves two extra loopback names, ``rebind.test`` and ``evil.test``, to
127.0.0.1 (``--host-resolver-rules``). A rebinding attack serves its page from the
attacker's name first, then re-points the name at 127.0.0.1, so the page's own
requests reach the dashboard as same-origin ones. The test plays the first answer by
fulfilling the page's URL itself (Playwright's route); every later request of that
page goes through Chromium's resolver to the live dashboard, which must refuse them.
The dashboard runs without credentials, as ``kiln dashboard`` and ``kiln demo`` do by
default on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Route, async_playwright

from kiln import Client
from tests.support.web import fail_jobs
from tests.web.live import CHROMIUM_ARGS, LiveDashboard, chromium_or_skip

NAMES = "MAP rebind.test 127.0.0.1, MAP evil.test 127.0.0.1"
# the attack must reach loopback as a normal page would, not be stopped by Chromium's
# private-network checks first (which would let the test pass without the dashboard)
OPEN = "--disable-features=PrivateNetworkAccessRespectPreflightResults," \
    "BlockInsecurePrivateNetworkRequests,LocalNetworkAccessChecks"
ATTACK = """<!doctype html><title>cat pictures</title><script>
(async () => {
  const out = {};
  try {
    const page = await fetch('/jobs?state=failed');
    const text = await page.text();
    out.read = page.status;
    out.leaked = text.includes('SMTP timeout');
    const m = text.match(/name="csrf" value="([0-9a-f]{64})"/);
    out.csrf = m ? m[1] : '';
  } catch (e) { out.read = 'error: ' + e; }
  try {
    const sent = await fetch('/jobs/JOB/delete', {method: 'POST', redirect: 'manual',
                                                  body: new URLSearchParams({csrf: out.csrf})});
    out.delete = sent.type === 'opaqueredirect' ? 303 : sent.status;
  } catch (e) { out.delete = 'error: ' + e; }
  window.__result = out;
})();
</script>"""
FORM = """<!doctype html><title>win a prize</title>
<form id="f" method="post" action="TARGET"><input name="csrf" value="0"></form>
<script>document.getElementById('f').submit();</script>"""


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    path = chromium_or_skip()
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=path, args=[
            *CHROMIUM_ARGS, f"--host-resolver-rules={NAMES}", OPEN])
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def live(store_url: str, admin: Client) -> AsyncIterator[LiveDashboard]:
    dashboard = LiveDashboard(store_url)  # no credentials: the loopback default
    await asyncio.to_thread(dashboard.start)
    try:
        yield dashboard
    finally:
        await asyncio.to_thread(dashboard.stop)


async def _serve(page: Page, url: str, body: str) -> None:
    async def fulfill(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/html", body=body)

    await page.route(url, fulfill)


async def test_a_rebinding_page_can_neither_read_jobs_nor_delete_one(
    browser: Browser, live: LiveDashboard, admin: Client
) -> None:
    [job_id] = await fail_jobs(admin, 1)
    page = await browser.new_page()
    attack = f"http://rebind.test:{live.port}/attack.html"
    await _serve(page, attack, ATTACK.replace("JOB", str(job_id)))
    await page.goto(attack)
    await page.wait_for_function("window.__result !== undefined", timeout=15_000)
    result: dict[str, Any] = await page.evaluate("window.__result")
    assert result["read"] == 400 and result["leaked"] is False and result["csrf"] == ""
    assert result["delete"] == 400
    assert await admin.get(job_id) is not None

    # the dashboard's own name still works in the same browser
    own = await page.goto(f"{live.url}/jobs/{job_id}")
    assert own is not None and own.status == 200


async def test_a_form_on_another_loopback_name_cannot_post_to_the_dashboard(
    browser: Browser, live: LiveDashboard, admin: Client
) -> None:
    [job_id] = await fail_jobs(admin, 1)
    page = await browser.new_page()
    await page.goto(f"{live.url}/jobs/{job_id}")  # the operator has the dashboard open
    evil = f"http://evil.test:{live.port}/prize.html"
    await _serve(page, evil, FORM.replace("TARGET", f"{live.url}/jobs/{job_id}/delete"))
    async with page.expect_navigation(url=f"{live.url}/jobs/{job_id}/delete") as nav:
        await page.goto(evil)
    response = await nav.value
    assert response is not None and response.status == 403
    assert "Cross-origin request" in await page.content()
    assert await admin.get(job_id) is not None
    [entry] = await admin.audit(10)
    assert entry.action == "refused" and "evil.test" in str(entry.detail["reason"])
