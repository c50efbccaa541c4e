"""kiln.Fail through a real server on every store: raised or returned, it fails the job
for good on the attempt that says so, whatever attempts remain, as a failure everywhere
(the job's state and error, the JobFinished event that metrics count, the worker's log),
and a job that depends on it waits as on any failed dependency. kiln.testing.perform
reports the same outcome."""

from __future__ import annotations

import logging

import pytest

import kiln
import kiln.testing
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.waits import wait_for


def fail_app(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("f.raised", max_attempts=5, backoff=kiln.Constant(0))
    async def raised(job: kiln.Job) -> None:
        raise kiln.Fail("550 mailbox does not exist")

    @app.job("f.returned", max_attempts=5, backoff=kiln.Constant(0))
    def returned(job: kiln.Job) -> kiln.Fail:
        return kiln.Fail("the account was closed")

    @app.job("f.after")
    async def after(job: kiln.Job) -> None:
        return None

    return app


async def test_fail_fails_the_job_for_good_at_once(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = fail_app(store_url)
    store = await open_store(store_url)
    caplog.set_level(logging.INFO, logger="kiln")
    try:
        client = kiln.Client(store, app.kinds)
        raised = await client.enqueue("f.raised", {})
        returned = await client.enqueue("f.returned", {})
        dependent = await client.enqueue("f.after", {}, depends_on=[raised])
        running = await Running(app.server({"default": 2}, config())).started()
        try:
            async def failed() -> list[kiln.JobRow] | None:
                rows = [await job_of(store, i) for i in (raised, returned)]
                return rows if all(r.state is kiln.JobState.FAILED for r in rows) else None

            rows = await wait_for(failed, 15, "both jobs to fail")
        finally:
            await running.stop()
        for row, reason in zip(rows, ("550 mailbox does not exist", "the account was closed"),
                               strict=True):
            assert row.attempt == 1 and row.max_attempts == 5  # no attempt retried
            assert [e.error for e in row.errors] == [f"Fail: {reason}"]
            assert row.result is None
            [finished] = running.finished(row.id)
            assert finished.outcome is kiln.Outcome.FAILED
            assert isinstance(finished.error, kiln.Fail) and finished.error.reason == reason
            assert any(f"#{row.id}" in r.getMessage() and "failed for good" in r.getMessage()
                       for r in caplog.records), [r.getMessage() for r in caplog.records]
        waiting = await job_of(store, dependent)
        assert waiting.state is kiln.JobState.AWAITING  # as on any failed dependency
    finally:
        await store.close()


def test_perform_reports_fail_as_failed() -> None:
    app = fail_app("sqlite:///:memory:")
    for kind in ("f.raised", "f.returned"):
        done = kiln.testing.perform(app, kind, {}, raise_errors=False)
        assert done.outcome is kiln.Outcome.FAILED, kind
        assert isinstance(done.error, kiln.Fail)


def test_fail_is_an_exception_with_its_reason() -> None:
    error = kiln.Fail("bounced")
    assert isinstance(error, Exception) and error.reason == "bounced" and str(error) == "bounced"
    assert kiln.Fail().reason == "failed by its handler"
