"""Issue 44 N1 in real Chromium: a foreign page (another loopback port, so another
origin) posts blind to the dashboard ten times while the operator has it open; the
refusals are audited, and the operator's own Requeue click and sign-in still work.

Runs on SQLite only: what it tests (the Guard's throttle) lives above the store."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, expect

from kiln import Client
from kiln._model._job import JobState
from tests.support.web import TOKEN, fail_jobs
from tests.web.live import LiveDashboard

FOREIGN_PAGE = """<!doctype html><title>cat pictures</title><p id="s">loading</p>
<script>
(async function () {
  let n = 0;
  for (let i = 0; i < 10; i++) {
    const path = i % 2 ? "/login" : "/jobs/bulk";
    try {
      await fetch("TARGET" + path, {method: "POST", mode: "no-cors",
        body: "token=guess&ids=1&action=delete",
        headers: {"Content-Type": "application/x-www-form-urlencoded"}});
      n++;
    } catch (e) { n += 0; }
  }
  document.getElementById("s").textContent = "sent " + n;
})();
</script>"""


@pytest.fixture
def foreign_site(live: LiveDashboard) -> Iterator[str]:
    """A page on another loopback port that posts to the dashboard when opened."""
    body = FOREIGN_PAGE.replace("TARGET", live.url).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_a_foreign_page_cannot_lock_the_operator_out(
    browser: Browser, live: LiveDashboard, admin: Client, foreign_site: str
) -> None:
    [job_id] = await fail_jobs(admin, 1)
    context = await browser.new_context()
    operator = await context.new_page()
    await operator.goto(live.url + "/")
    await operator.fill('input[name="token"]', TOKEN)
    await operator.click('form.login button[type="submit"]')
    await expect(operator.locator("h1")).to_have_text("Overview")
    await operator.goto(f"{live.url}/jobs/{job_id}")

    foreign = await context.new_page()  # the operator opens another site in a new tab
    await foreign.goto(foreign_site)
    await expect(foreign.locator("#s")).to_have_text("sent 10", timeout=15000)
    refused = [e for e in await admin._store.audit_list(50) if e.action == "refused"]
    assert len(refused) == 10, refused  # every blind post arrived, and was refused

    async with operator.expect_navigation():
        await operator.click("form[action$='/requeue'] button")
    assert "Too many" not in (await operator.text_content("main") or "")
    job = await admin.get(job_id)
    assert job is not None and job.state is JobState.AVAILABLE

    async with operator.expect_navigation():  # sign out, and in again
        await operator.click("form[action$='/logout'] button")
    await operator.fill('input[name="token"]', TOKEN)
    await operator.click('form.login button[type="submit"]')
    await expect(operator.locator("h1")).to_have_text("Overview")
    await context.close()
