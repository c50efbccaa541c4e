"""What the dashboard tests (tests/web) share: the token, forms and their CSRF fields, and
failed jobs to look at."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from kiln import Client
from kiln._model._job import AttemptError, JobResult, JobState, Outcome

if TYPE_CHECKING:  # playwright only where the browser tests run
    from playwright.async_api import Page

TOKEN = "test-token-0123456789abcdef"
BASE_URL = "http://127.0.0.1"  # a name the dashboard answers to: it refuses other Hosts
CSRF_INPUT = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
TRACEBACK = 'Traceback (most recent call last):\n  File "jobs.py", line 3, in run\n'


MakeHttp = Callable[..., httpx.AsyncClient]
HIDDEN = re.compile(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">')


def hidden_fields(page: str) -> dict[str, str]:
    """The hidden fields of a page's forms (a confirmation's filter and bounds)."""
    return {name: html.unescape(value) for name, value in HIDDEN.findall(page)}


def csrf_of(html: str) -> str:
    match = CSRF_INPUT.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def post_form(http: httpx.AsyncClient, page: str, action: str,
                    data: dict[str, Any]) -> httpx.Response:
    """Load ``page`` (for its CSRF token and cookie), then POST ``data`` to ``action``.

    A list value posts the field once per item (the job selection)."""
    loaded = await http.get(page)
    assert loaded.status_code == 200, loaded.text
    return await http.post(action, data={**data, "csrf": csrf_of(loaded.text)})


async def fail_jobs(
    client: Client, n: int, *, kind: str = "email.send", queue: str = "mail",
    error: str = "SMTP timeout", args: Any = None, **options: Any,
) -> list[int]:
    """Enqueue ``n`` jobs and drive them to failed through the store's own calls."""
    ids = [await client.enqueue(kind, args if args is not None else {"i": i}, queue=queue,
                                **options) for i in range(n)]
    rows = await client._store.job_claim(queue, [kind], n, "web-test-server")
    assert sorted(r.id for r in rows) == sorted(ids), "the queue held other available jobs"
    results = [
        JobResult(job_id=r.id, server_id="web-test-server", attempt=r.attempt,
                  outcome=Outcome.FAILED,
                  error=AttemptError(r.attempt, time.time(), error, TRACEBACK + error,
                                     "web-test-server"))
        for r in rows
    ]
    applied = await client._store.job_results_apply(results)
    assert applied.applied == n
    return [int(i) for i in ids]


async def sign_in(page: Page, base: str) -> None:
    """Sign in to the dashboard at ``base`` in a browser page (refused without the token)."""
    from playwright.async_api import expect

    response = await page.goto(base + "/")
    assert response is not None and response.status == 401  # refused without the token
    await page.fill('input[name="token"]', TOKEN)
    await page.click('button[type="submit"]')
    await expect(page.locator("h1")).to_have_text("Overview")


async def running_job(client: Client, queue: str = "race") -> int:
    """A job of kind race.fail claimed by a server of the test: running."""
    job_id = await client.enqueue("race.fail", {}, queue=queue, max_attempts=1)
    [row] = await client._store.job_claim(queue, ["race.fail"], 1, "web-test-server")
    assert row.id == job_id
    return int(job_id)


async def fail_running(client: Client, job_id: int) -> None:
    """The running job ``job_id`` fails for good, as its server would record it."""
    row = await client.get(job_id)
    assert row is not None and row.state is JobState.RUNNING
    applied = await client._store.job_results_apply([JobResult(
        job_id=job_id, server_id="web-test-server", attempt=row.attempt,
        outcome=Outcome.FAILED,
        error=AttemptError(row.attempt, time.time(), "boom", "boom", "web-test-server"))])
    assert applied.applied == 1
