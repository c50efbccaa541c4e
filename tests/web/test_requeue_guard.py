"""Cancel then Requeue must not run a job twice at once (issue 21, defect 7).

A real kiln server runs a handler that blocks and ignores its cancellation (a cancel
stops a handler only if it lets itself be stopped); the dashboard cancels the job and
tries to requeue it at once, as do the client API and the CLI's code path. The requeue
is refused while the handler runs; once the handler returns, its fenced-off result ends
the attempt and the job can run again, alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

import kiln
from kiln import JobFilter, JobState
from kiln.web import create_app
from tests.support.config import fast_config
from tests.support.waits import wait_for
from tests.support.web import BASE_URL, post_form

FAST = fast_config(shutdown_timeout=None)


class Card:
    """A payment handler that counts how many charges run at once, and swallows the
    cancellation of its task (as a handler that must not stop halfway might)."""

    def __init__(self) -> None:
        self.started = 0
        self.running = 0
        self.most = 0
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.ignored = 0

    async def charge(self, job: kiln.Job) -> None:
        self.started += 1
        self.running += 1
        self.most = max(self.most, self.running)
        self.entered.set()
        try:
            while not self.gate.is_set():
                try:
                    await self.gate.wait()
                except asyncio.CancelledError:
                    self.ignored += 1
        finally:
            self.running -= 1


@pytest.fixture
async def card_app(store_url: str) -> AsyncIterator[tuple[kiln.App, Card]]:
    card = Card()
    app = kiln.App(store_url, known_kinds_only=False)
    app.job("card.charge", queue="pay")(card.charge)
    await app.amigrate()
    try:
        yield app, card
    finally:
        await app.aclose()


async def _true(value: bool) -> bool:
    return value


async def _state(client: kiln.Client, job_id: int) -> JobState:
    row = await client.get(job_id)
    assert row is not None
    return row.state


async def test_cancel_then_requeue_waits_for_the_running_attempt(
    card_app: tuple[kiln.App, Card],
) -> None:
    app, card = card_app
    server = app.server(queues={"pay": 2}, config=FAST)
    running = asyncio.create_task(server.run())
    dashboard = create_app(app, dead_after=6)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=dashboard),
                             base_url=BASE_URL)
    try:
        client = app.client()
        job_id = await client.enqueue("card.charge", {"cents": 500}, queue="pay")
        await asyncio.wait_for(card.entered.wait(), 20)
        page = f"/jobs/{job_id}"
        assert (await post_form(http, page, f"{page}/cancel", {})).status_code == 303
        assert await _state(client, job_id) is JobState.CANCELLED
        await wait_for(lambda: _true(card.ignored == 1), 5, "the cancel ignored")  # it was told
        assert card.running == 1  # and ignored it: it still runs

        response = await post_form(http, page, f"{page}/requeue", {})
        assert response.headers["location"] == f"{page}?done=requeue&n=0&held=1"
        shown = await http.get(response.headers["location"])
        assert "that attempt may still be running" in shown.text
        assert await client.requeue(JobFilter(ids=(job_id,))) == 0  # the client API too
        assert await client.requeue(JobFilter(states=(JobState.CANCELLED,))) == 0
        assert await _state(client, job_id) is JobState.CANCELLED  # so nobody claims it

        card.gate.set()  # the first charge returns; its result is fenced off

        async def requeued() -> bool:
            return await client.requeue(JobFilter(ids=(job_id,))) == 1

        await wait_for(requeued, 20, "requeued()")

        async def ran_again() -> bool:
            return card.started == 2 and await _state(client, job_id) is JobState.COMPLETED

        await wait_for(ran_again, 20, "ran_again()")
        assert card.most == 1  # never two charges at once
    finally:
        await http.aclose()
        server.stop()
        await asyncio.wait_for(running, 30)
