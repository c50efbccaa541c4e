"""Stored results through a real server on every store: a handler's return value is
kept with its completed job, fan-in reads its parts' results, and a value that cannot
be stored (not JSON, too large) fails the attempt with a clear error, retried per the
kind's policy, and writes no result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import kiln
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.waits import wait_for


def results_app(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("r.async")
    async def async_result(job: kiln.Job) -> Any:
        return {"echo": job.args, "attempt": job.attempt}

    @app.job("r.sync")
    def sync_result(job: kiln.Job) -> Any:
        return ["sync", job.args["n"]]

    @app.job("r.none")
    async def returns_none(job: kiln.Job) -> None:
        return None

    @app.job("r.not_json", max_attempts=2)
    async def not_json(job: kiln.Job) -> Any:
        return {"when": datetime.now(UTC)}

    @app.job("r.too_big", max_attempts=1, max_result_bytes=100)
    async def too_big(job: kiln.Job) -> Any:
        return "x" * 200

    @app.job("r.server_limit", max_attempts=1)
    def server_limit(job: kiln.Job) -> Any:
        return "é" * 600  # 1,200 bytes of UTF-8, over the server's 1,000

    @app.job("r.part")
    async def part(job: kiln.Job) -> Any:
        return None if job.args["n"] == 0 else {"n": job.args["n"]}

    @app.job("r.sum")
    async def total(job: kiln.Job) -> Any:
        parts = await job.dependency_results()
        return {"parts": {str(k): v for k, v in parts.items()},
                "sum": sum(v["n"] for v in parts.values() if v is not None)}

    @app.job("r.sum_sync")
    def total_sync(job: kiln.Job) -> Any:
        return sorted(v["n"] for v in job.dependency_results_sync().values() if v)

    return app


async def _settle(url: str, enqueue: Callable[[kiln.Client], Awaitable[list[int]]],
                  states: frozenset[kiln.JobState] = kiln._model._job.FINISHED_STATES,
                  ) -> tuple[list[kiln.JobRow], Running]:
    app = results_app(url)
    store = await open_store(url)
    try:
        ids = await enqueue(kiln.Client(store, app.kinds))
        running = await Running(app.server({"default": 4},
                                           config(max_result_bytes=1000))).started()
        try:
            async def done() -> list[kiln.JobRow] | None:
                rows = [await job_of(store, i) for i in ids]
                return rows if all(r.state in states for r in rows) else None

            rows = await wait_for(done, 15, f"jobs {ids} to finish")
        finally:
            await running.stop()
        return rows, running
    finally:
        await store.close()


async def test_a_handlers_return_value_is_stored(store_url: str) -> None:
    async def enqueue(client: kiln.Client) -> list[int]:
        return [await client.enqueue("r.async", {"a": 1}), await client.enqueue("r.sync", {"n": 7}),
                await client.enqueue("r.none", {})]

    rows, _running = await _settle(store_url, enqueue)
    assert [r.state for r in rows] == [kiln.JobState.COMPLETED] * 3
    assert [r.result for r in rows] == [{"echo": {"a": 1}, "attempt": 1}, ["sync", 7], None]


async def test_a_result_that_is_not_json_fails_the_attempt_and_is_retried(
    store_url: str,
) -> None:
    async def enqueue(client: kiln.Client) -> list[int]:
        return [await client.enqueue("r.not_json", {}, backoff=kiln.Constant(0))]

    [row], running = await _settle(store_url, enqueue)
    assert row.state is kiln.JobState.FAILED and row.attempt == 2 and row.result is None
    assert [e.attempt for e in row.errors] == [1, 2]  # retried per the kind's policy
    message = row.errors[-1].error
    assert message.startswith(f"ResultError: the result of job {row.id} (kind 'r.not_json')"
                              " cannot be stored: it is not JSON")
    assert "datetime is not JSON serializable" in message
    finished = running.finished(row.id)
    assert isinstance(finished[-1].error, kiln.ResultError)


async def test_a_result_over_max_result_bytes_fails_with_the_limit_named(
    store_url: str,
) -> None:
    async def enqueue(client: kiln.Client) -> list[int]:
        return [await client.enqueue("r.too_big", {}), await client.enqueue("r.server_limit", {})]

    rows, _running = await _settle(store_url, enqueue)
    assert [r.state for r in rows] == [kiln.JobState.FAILED] * 2
    assert all(r.result is None for r in rows)
    assert "it is 202 bytes as JSON, over max_result_bytes (100)" in rows[0].errors[-1].error
    assert "it is 1,202 bytes as JSON, over max_result_bytes (1,000)" in rows[1].errors[-1].error


async def test_fan_in_reads_its_parts_results(store_url: str) -> None:
    async def enqueue(client: kiln.Client) -> list[int]:
        parts, final = await client.enqueue_fan_in(
            [("r.part", {"n": n}) for n in range(3)], ("r.sum", {})
        )
        _more, final_sync = await client.enqueue_fan_in(
            [("r.part", {"n": n}) for n in (4, 5)], ("r.sum_sync", {})
        )
        return [*parts, final, final_sync]

    rows, _running = await _settle(store_url, enqueue)
    *parts, final, final_sync = rows
    assert final.state is kiln.JobState.COMPLETED
    assert final.result == {
        "parts": {str(parts[0].id): None, str(parts[1].id): {"n": 1},
                  str(parts[2].id): {"n": 2}},
        "sum": 3,
    }
    assert final_sync.result == [4, 5]
