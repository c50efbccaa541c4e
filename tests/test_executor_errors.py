"""kiln's own per-job failures and bad backoff values are failed attempts with their error
recorded, never hand-backs (which give the attempt back and would run the job again for
ever). Store-free: the executor and the pool of tests/test_pool.py's fake store."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from kiln._model._job import JobRow, Outcome
from kiln._server._handle import Job
from tests.test_deadlines import _run
from tests.test_pool import FakeStore, drain


class _Returns:
    """A backoff policy (not Custom, which clamps at 0) that returns ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def wait(self, attempt: int) -> float:
        return self.value

    def bounds(self, attempt: int) -> tuple[float, float]:
        return self.value, self.value


@pytest.mark.parametrize("value", [math.inf, -1.0, math.nan])
async def test_a_backoff_that_returns_no_usable_wait_falls_back_to_the_default(
    value: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kiln._server import _executor

    async def failing(job: Job) -> None:
        raise RuntimeError("nope")

    monkeypatch.setattr(_executor.Executor, "backoff_of",
                        lambda self, row, kind: _Returns(value))
    result, _task = await _run(failing, timeout=30)
    assert result.outcome is Outcome.RETRY
    assert math.isfinite(result.run_at_delay) and 0.5 <= result.run_at_delay <= 1.0
    assert result.error is not None and "default backoff" in result.error.error


async def test_a_crash_in_kilns_own_per_job_code_is_a_failed_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kiln._server import _executor

    real_run = _executor.Executor.run

    async def broken(self: Any, row: JobRow) -> Any:
        if row.id == 1:
            raise SystemExit("a bug in kiln's per-job code")
        return await real_run(self, row)

    monkeypatch.setattr(_executor.Executor, "run", broken)
    store = FakeStore(3)

    async def quick(job: Job) -> None:
        await asyncio.sleep(0)

    await drain(store, quick, lambda: len(store.results) == 3)
    by_id = {r.job_id: r for r in store.results}
    crashed = by_id[1]
    assert crashed.outcome is Outcome.RETRY and crashed.attempt == 1
    assert crashed.error is not None and "SystemExit" in crashed.error.error
    assert "kiln failed while running this attempt" in crashed.error.error
    assert by_id[2].outcome is by_id[3].outcome is Outcome.COMPLETED
