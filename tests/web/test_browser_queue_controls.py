"""Browser test of the queues page's controls: headless Chromium (Playwright, the system
browser) pauses, resumes and re-sizes a queue that a real worker serves, through the
confirmation dialog, and the worker obeys."""

from __future__ import annotations

import asyncio

from playwright.async_api import Browser, Dialog, Page, expect

import kiln
from kiln import Client, JobState
from tests.web.conftest import TOKEN
from tests.web.live import LiveDashboard

FAST = kiln.ServerConfig(poll_interval=0.2, heartbeat_interval=0.2, kill_grace=0.2,
                         dead_after=6, leader_ttl=1)


async def _until(check: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (check() if callable(check) else check):
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def _sign_in(page: Page, base: str) -> None:
    await page.goto(base + "/")
    await page.fill('input[name="token"]', TOKEN)
    await page.click('button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")


async def test_pause_resume_and_concurrency_from_the_browser(
    browser: Browser, live: LiveDashboard, admin: Client, store_url: str
) -> None:
    app = kiln.App(store_url)

    @app.job("email.send", queue="mail")
    async def send(job: kiln.Job) -> None:
        pass

    server = app.server(queues={"mail": 4}, config=FAST)
    running = asyncio.create_task(server.run())
    try:
        await _until(lambda: server.stats()["state"] == "running")
        page = await browser.new_page()
        dialogs: list[str] = []
        answer = {"accept": False}

        async def on_dialog(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            await (dialog.accept() if answer["accept"] else dialog.dismiss())

        page.on("dialog", on_dialog)
        await _sign_in(page, live.url)
        await page.goto(live.url + "/queues")
        row = page.locator('tr[data-queue="mail"]')
        await expect(row.locator(".queue-state")).to_contain_text("active")

        await row.locator('button[data-action="pause"]').click()  # dismissed: nothing
        assert dialogs and dialogs[-1].startswith("Pause queue mail?")
        assert not (await admin.store.queue_controls()).paused("mail")

        answer["accept"] = True
        await row.locator('button[data-action="pause"]').click()
        await expect(page.locator(".flash")).to_contain_text("Paused")
        await expect(row.locator(".queue-state")).to_contain_text("paused")
        await expect(row.locator(".queue-state")).to_contain_text("dashboard:token@127.0.0.1")
        await _until(lambda: server.pools["mail"].paused)
        job_id = await admin.enqueue("email.send", {}, queue="mail")
        await asyncio.sleep(0.5)  # a few poll intervals: the paused queue's job waits
        assert (await admin.get(job_id)).state is JobState.AVAILABLE  # type: ignore[union-attr]

        await row.locator('button[data-action="resume"]').click()
        await expect(page.locator(".flash")).to_contain_text("Resumed")

        async def completed() -> bool:
            found = await admin.get(job_id)
            return found is not None and found.state is JobState.COMPLETED

        for _ in range(100):
            if await completed():
                break
            await asyncio.sleep(0.05)
        assert await completed()

        await row.locator('input[name="concurrency"]').fill("2")
        await row.locator('form.queue-concurrency button').click()
        await expect(page.locator(".flash")).to_contain_text("Concurrency changed")
        assert dialogs[-1].startswith("Change the concurrency of queue mail?")
        await _until(lambda: server.pools["mail"].concurrency == 2)
        await expect(row.locator("td.num").last).to_have_text("2")
        actions = [e.action for e in await admin.store.audit_list(3)]
        assert actions == ["queue_concurrency", "queue_resume", "queue_pause"]
    finally:
        server.stop()
        await asyncio.wait_for(running, 30)
