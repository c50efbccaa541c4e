"""Whatever an attempt raises is a failed attempt with its error recorded, on every
store: BaseException subclasses from a handler (sys.exit(), KeyboardInterrupt in a
thread, a CancelledError the handler raised itself), a backoff that fails, and kiln's
own per-job code. A hand-back gives the attempt back, so handing such a job back ran it
again and again without end (issue 22, defect 4: hundreds of runs in seconds, no
JobFinished, stats().handed_back 0).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest

import kiln
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.waits import wait_for

RUNS: list[int] = []


def _sync_exit(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    sys.exit(3)


def _sync_interrupt(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    raise KeyboardInterrupt


async def _async_exit(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    sys.exit("bye")


async def _async_cancelled(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    raise asyncio.CancelledError("not from kiln")  # the handler's own, not the server's


async def _async_shutdown(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    raise kiln.Shutdown("raised by the handler, but the server is not shutting down")


async def _async_generator_exit(job: kiln.Job) -> None:
    RUNS.append(job.attempt)
    raise GeneratorExit


HANDLERS: dict[str, tuple[Callable[[kiln.Job], Any], str]] = {
    "sync-sys-exit": (_sync_exit, "SystemExit: 3"),
    "sync-keyboard-interrupt": (_sync_interrupt, "KeyboardInterrupt"),
    "async-sys-exit": (_async_exit, "SystemExit: bye"),
    "async-own-cancelled-error": (_async_cancelled, "CancelledError: not from kiln"),
    "async-shutdown-outside-shutdown": (_async_shutdown, "Shutdown: raised by the handler"),
    "async-generator-exit": (_async_generator_exit, "GeneratorExit"),
}


async def _run_until_settled(url: str, app: kiln.App, kind: str) -> tuple[kiln.JobRow, Running]:
    store = await open_store(url)
    try:
        job_id = await kiln.Client(store, app.kinds).enqueue(kind, {})
        running = await Running(app.server({"default": 2}, config())).started()
        try:
            async def settled() -> kiln.JobRow | None:
                row = await job_of(store, job_id)
                return row if row.state is kiln.JobState.FAILED else None

            row = await wait_for(settled, 15, f"job {job_id} to fail for good")
        finally:
            await running.stop()
        return row, running
    finally:
        await store.close()


@pytest.mark.parametrize("case", list(HANDLERS))
async def test_a_base_exception_from_a_handler_is_a_failed_attempt(
    store_url: str, case: str
) -> None:
    handler, text = HANDLERS[case]
    RUNS.clear()
    app = kiln.App(store_url)
    app.register("boom", handler, max_attempts=2, backoff=kiln.Constant(0.05))
    row, running = await _run_until_settled(store_url, app, "boom")
    assert RUNS == [1, 2], f"ran {len(RUNS)} times"
    assert row.attempt == 2 and [e.attempt for e in row.errors] == [1, 2]
    assert all(text in e.error for e in row.errors), [e.error for e in row.errors]
    assert [e.outcome for e in running.finished()] == [kiln.Outcome.RETRY, kiln.Outcome.FAILED]
    stats = running.server.stats()
    assert (stats.retried, stats.failed, stats.handed_back) == (1, 1, 0)


async def test_a_failing_backoff_falls_back_to_the_default_and_says_so(store_url: str) -> None:
    RUNS.clear()
    app = kiln.App(store_url)
    waits = [0.05]  # shorter than max_attempts: the second wait raises IndexError

    @app.job("short_backoff", max_attempts=3, backoff=lambda attempt: waits[attempt - 1])
    async def short_backoff(job: kiln.Job) -> None:
        RUNS.append(job.attempt)
        raise RuntimeError(f"failure {job.attempt}")

    row, running = await _run_until_settled(store_url, app, "short_backoff")
    assert RUNS == [1, 2, 3]
    assert [e.attempt for e in row.errors] == [1, 2, 3]
    assert "backoff failed" not in row.errors[0].error
    second = row.errors[1].error
    assert "RuntimeError: failure 2" in second and "IndexError" in second, second
    assert "default backoff" in second, second
    # the default backoff, Exponential(1, 3600), waits between 1 and 2 s after attempt 2
    assert 0.9 <= row.errors[2].at - row.errors[1].at < 5
    outcomes = [e.outcome for e in running.finished()]
    assert outcomes == [kiln.Outcome.RETRY, kiln.Outcome.RETRY, kiln.Outcome.FAILED]
    assert running.server.stats().handed_back == 0
