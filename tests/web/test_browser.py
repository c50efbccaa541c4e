"""Browser tests: headless Chromium (Playwright, the system browser) against a live
dashboard on a real store, with a kiln worker running the jobs.

Takes the screenshots {overview,failed-tab,job}.png on the way, into the test's own
temporary directory, or into $KILN_SCREENSHOTS when set: the README's are refreshed with
``KILN_SCREENSHOTS=docs/screenshots python -m pytest tests/web/test_browser.py``, so an
ordinary test run leaves the checkout as it found it.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect

import kiln
from kiln import Client, JobFilter, JobState
from tests.support.config import fast_config
from tests.support.waits import wait_for
from tests.support.web import TOKEN, sign_in
from tests.web.live import LiveDashboard

FAST = fast_config(shutdown_timeout=None)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
XSS = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"


class Outage:
    """Whether email.send's downstream is down: its jobs fail with their own error."""

    def __init__(self) -> None:
        self.down = True


def worker_app(url: str, outage: Outage) -> kiln.App:
    app = kiln.App(url, known_kinds_only=False)

    @app.job("email.send", queue="mail")
    async def send(job: kiln.Job) -> None:
        if outage.down:
            raise RuntimeError(job.args["error"])

    return app


async def _seed(admin: Client) -> dict[str, Any]:
    smtp = [await admin.enqueue("email.send", {"to": f"user{i}@example.com",
                                               "error": "SMTP timeout"}, queue="mail",
                                max_attempts=1)
            for i in range(3)]
    dns = [await admin.enqueue("email.send", {"to": "ops@example.com",
                                              "error": "DNS failure for mx.example.com"},
                               queue="mail", max_attempts=1,
                               metadata={"otel": {"traceparent": TRACEPARENT}})]
    reports = [await admin.enqueue("report.build", {"for": i}, queue="reports",
                                   depends_on=[i]) for i in smtp]
    await admin.enqueue("report.build", {"for": dns[0]}, queue="reports", depends_on=dns)
    xss = await admin.enqueue("xss.probe", {"html": XSS}, queue="other",
                              metadata={"note": XSS})
    return {"smtp": smtp, "dns": dns, "reports": reports, "xss": xss}


async def _states(admin: Client, ids: list[int]) -> list[JobState]:
    rows = {r.id: r.state for r in await admin.list(JobFilter(ids=tuple(ids)), limit=100)}
    return [rows[i] for i in ids]


def _row_ids(page_html: str) -> list[int]:
    return [int(x) for x in re.findall(r'name="ids" value="(\d+)"', page_html)]


async def test_requeue_all_failed_from_the_browser(
    browser: Browser, live: LiveDashboard, admin: Client, store_url: str, tmp_path: Path
) -> None:
    shots = Path(os.environ.get("KILN_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    jobs = await _seed(admin)
    outage = Outage()
    server = worker_app(store_url, outage).server(queues={"mail": 4}, config=FAST)
    running = asyncio.create_task(server.run())
    try:
        failed = jobs["smtp"] + jobs["dns"]
        await wait_for(lambda: _all_in(admin, failed, JobState.FAILED), 20.0,
                       "the jobs failed", interval=0.1)
        page = await browser.new_page(viewport={"width": 1280, "height": 860})
        await sign_in(page, live.url)
        # counts are cached (count_ttl): reload until they show the failures, so the
        # screenshots show what an operator would see a few seconds later
        deadline = time.monotonic() + 15
        while f"{len(failed)} failed" not in await page.content():
            assert time.monotonic() < deadline, "the overview never counted the failures"
            await asyncio.sleep(0.5)
            await page.goto(live.url + "/")
        await page.screenshot(path=str(shots / "overview.png"), full_page=True)

        await page.click("a.card-failed")  # the overview's failed count opens the tab
        await expect(page.locator("nav.tabs a.current")).to_contain_text("Failed")
        assert sorted(_row_ids(await page.content())) == sorted(failed)
        await page.screenshot(path=str(shots / "failed-tab.png"), full_page=True)

        await page.fill('input[name="error"]', "smtp")
        await page.click('form.filters button[type="submit"]')
        await expect(page.locator("table.jobs tbody tr")).to_have_count(3)
        assert sorted(_row_ids(await page.content())) == sorted(jobs["smtp"])

        await page.click("#requeue-all")
        await expect(page.locator("#confirm-count")).to_have_text("3")
        assert await _states(admin, jobs["smtp"]) == [JobState.FAILED] * 3  # not yet
        outage.down = False  # the outage is over
        await page.click("#confirm-requeue")
        await expect(page.locator(".flash")).to_have_text("3 jobs requeued.")
        await expect(page.locator("table.jobs tbody tr")).to_have_count(0)  # they left

        await wait_for(lambda: _all_in(admin, jobs["smtp"], JobState.COMPLETED), 20.0,
                       "the smtp jobs completed", interval=0.1)
        await wait_for(lambda: _all_in(admin, jobs["reports"], JobState.AVAILABLE), 20.0,
                       "the reports available", interval=0.1)
        await page.goto(live.url + "/jobs?state=available&queue=reports")
        assert sorted(_row_ids(await page.content())) == sorted(jobs["reports"])
        await page.goto(live.url + "/jobs?state=failed")
        assert _row_ids(await page.content()) == jobs["dns"]  # the other failure stays

        await page.goto(f"{live.url}/jobs/{jobs['dns'][0]}")
        await expect(page.locator(".errors .error-message")).to_contain_text("DNS failure")
        await expect(page.locator("dl.facts").first).to_contain_text(TRACEPARENT.split("-")[1])
        await page.screenshot(path=str(shots / "job.png"), full_page=True)

        await page.goto(live.url + "/audit")
        await expect(page.locator("table.audit tbody tr").first).to_contain_text("requeue")
        await expect(page.locator("table.audit tbody tr").first).to_contain_text(
            "dashboard:token@127.0.0.1")
    finally:
        server.stop()
        await asyncio.wait_for(running, 30)


async def _all_in(admin: Client, ids: list[int], state: JobState) -> bool:
    return await _states(admin, ids) == [state] * len(ids)


async def test_script_in_args_renders_inert(browser: Browser, live: LiveDashboard,
                                           admin: Client) -> None:
    jobs = await _seed(admin)
    page = await browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await sign_in(page, live.url)
    for path in (f"/jobs/{jobs['xss']}", "/jobs?queue=other"):
        await page.goto(live.url + path)
        assert await page.evaluate("window.__pwned") is None, path
    await page.goto(f"{live.url}/jobs/{jobs['xss']}")
    await expect(page.locator("#args")).to_contain_text("<script>window.__pwned = 1</script>")
    await expect(page.locator("#metadata")).to_contain_text("onerror=")
    assert await page.locator("#args script, #args img, #metadata img").count() == 0
    assert dialogs == []


async def test_requests_without_token_or_csrf_are_refused(
    browser: Browser, live: LiveDashboard, admin: Client
) -> None:
    [job_id] = (await _seed(admin))["dns"]
    stranger = await browser.new_context()
    response = await stranger.request.get(f"{live.url}/jobs?state=failed")
    assert response.status == 401
    response = await stranger.request.post(f"{live.url}/jobs/{job_id}/delete", form={})
    assert response.status == 401
    await stranger.close()

    page = await browser.new_page()
    await sign_in(page, live.url)
    forms: list[dict[str, str | float | bool]] = [{}, {"csrf": "f" * 64}]
    for form in forms:  # signed in, but no (valid) CSRF token
        response = await page.request.post(f"{live.url}/jobs/{job_id}/delete", form=form,
                                           max_redirects=0)
        assert response.status == 403
        assert "CSRF" in await response.text()
    assert (await admin.get(job_id)) is not None
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    response = await page.request.post(f"{live.url}/jobs/{job_id}/delete", headers=bearer,
                                       form={}, max_redirects=0)
    assert response.status == 403  # a valid token does not replace the CSRF token
