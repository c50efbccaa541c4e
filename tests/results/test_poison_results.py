"""One result the database would refuse never blocks the others (issue 22, defect 1).

Six good jobs and one bad one on each store: an exception message with a NUL
(PostgreSQL's jsonb rejects ``\\u0000``) or a lone surrogate (not UTF-8), a huge
backoff ("interval out of range", past year 9999), a ``Snooze(inf)``. Before the fix
all seven stayed running on PostgreSQL while the completer retried the batch forever
and ``healthy()`` stayed true.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import kiln
from kiln import JobState
from tests.support.results import Serve
from tests.support.waits import wait_for


def app_of(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("good", queue="q")
    async def good(job: kiln.Job) -> None:
        await asyncio.sleep(0.05)  # the bad one finishes among them: one batch

    @app.job("nul", queue="q", max_attempts=1)
    async def nul(job: kiln.Job) -> None:
        raise RuntimeError("bad byte \x00 in here")

    @app.job("surrogate", queue="q", max_attempts=1)
    async def surrogate(job: kiln.Job) -> None:
        raise RuntimeError("half a pair \ud800 in here")

    @app.job("huge_backoff", queue="q", max_attempts=2, backoff=lambda attempt: 1e300)
    async def huge_backoff(job: kiln.Job) -> None:
        raise RuntimeError("wait forever")

    @app.job("nan_backoff", queue="q", max_attempts=2, backoff=lambda attempt: float("nan"))
    async def nan_backoff(job: kiln.Job) -> None:
        if job.attempt == 1:
            raise RuntimeError("wait NaN")

    @app.job("snooze_forever", queue="q")
    async def snooze_forever(job: kiln.Job) -> kiln.Snooze:
        return kiln.Snooze(float("inf"))

    return app


BAD = ["nul", "surrogate", "huge_backoff", "nan_backoff", "snooze_forever"]


@pytest.mark.parametrize("bad", BAD)
async def test_a_bad_result_does_not_hold_the_good_ones(
    store_url: str, serve: Serve, bad: str
) -> None:
    app = app_of(store_url)
    client = app.client()
    await app.amigrate()
    ids = [await client.enqueue("good", {"i": i}) for i in range(6)]
    bad_id = await client.enqueue(bad, {})
    server = await serve(app, {"q": 8})

    async def settled() -> bool:
        rows = [await client.get(i) for i in (*ids, bad_id)]
        return all(r is not None and r.state is not JobState.RUNNING and r.attempt >= 1
                   for r in rows[:-1]) and rows[-1] is not None and (
            rows[-1].state not in (JobState.RUNNING, JobState.AVAILABLE))

    await wait_for(settled, 15, "every job settled")
    for job_id in ids:
        row = await client.get(job_id)
        assert row is not None and row.state is JobState.COMPLETED
    row = await client.get(bad_id)
    assert row is not None
    check_bad(bad, row)
    assert server.healthy(), server.healthy().reasons
    stats = server.stats()
    assert stats.results_dropped == 0 and stats.results_pending == 0
    await app.aclose()


def check_bad(bad: str, row: Any) -> None:
    if bad == "nul":
        assert row.state is JobState.FAILED
        assert "bad byte \\x00 in here" in row.errors[-1].error
    elif bad == "surrogate":
        assert row.state is JobState.FAILED
        assert "half a pair \\ud800 in here" in row.errors[-1].error
    elif bad == "huge_backoff":  # waits at most ten years
        assert row.state is JobState.SCHEDULED and row.attempt == 1
        assert row.run_at.year < 9999
    elif bad == "nan_backoff":  # no meaningful wait: retried at once
        assert row.state is JobState.COMPLETED and row.attempt == 2
    else:  # Snooze(inf) is refused where it is made: a failed attempt saying so
        assert row.state is JobState.SCHEDULED and row.attempt == 1
        assert "a snooze must be a finite, non-negative wait" in row.errors[-1].error
