"""Conformance: a rate-limited job's retries, snoozes, rescues and hand-backs go back
through admission (``pending``); jobs without a key are unchanged."""

from __future__ import annotations

import asyncio

import pytest

from kiln._model._job import JobRow, Outcome, RateLimit
from kiln._server.maintenance.rescuer import rescue_result
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, state_of

LIMIT = RateLimit(rate=1000, per=1.0, burst=10)


async def _admitted_and_claimed(store: Store) -> JobRow:
    [job_id] = await insert(store, job(rate_key="r", rate_limit=LIMIT, max_attempts=5))
    assert [a.job_id for a in (await store.jobs_admit("r", 10)).admitted] == [job_id]
    [row] = await claim(store)
    return row


@pytest.mark.parametrize(
    ("outcome", "delay"),
    [(Outcome.RETRY, 0.0), (Outcome.RETRY, 0.2), (Outcome.SNOOZED, 0.0),
     (Outcome.HANDED_BACK, 0.0)],
)
async def test_a_retry_or_snooze_waits_for_admission(
    store: Store, outcome: Outcome, delay: float
) -> None:
    row = await _admitted_and_claimed(store)
    first = await store.job_get(row.id)
    assert first is not None and first.admitted_at is not None
    await store.job_results_apply([result(row, outcome, delay=delay, error="429")])
    assert await state_of(store, row.id) == "pending"
    assert await claim(store) == []  # not claimable until admitted
    if delay:
        assert (await store.jobs_admit("r", 10)).admitted == []  # its run_at is ahead
        await asyncio.sleep(delay + 0.05)
    assert [a.job_id for a in (await store.jobs_admit("r", 10)).admitted] == [row.id]
    again = await store.job_get(row.id)
    assert again is not None and again.admitted_at is not None
    assert again.admitted_at > first.admitted_at
    [row2] = await claim(store)
    assert row2.id == row.id and row2.attempt == (2 if outcome is Outcome.RETRY else 1)


async def test_a_rescued_attempt_waits_for_admission(store: Store) -> None:
    row = await _admitted_and_claimed(store)
    await store.job_results_apply([rescue_result(row, "s1", None)])
    assert await state_of(store, row.id) == "pending"


async def test_failed_for_good_and_jobs_without_a_key_are_unchanged(store: Store) -> None:
    row = await _admitted_and_claimed(store)
    await store.job_results_apply([result(row, Outcome.FAILED, error="x")])
    assert await state_of(store, row.id) == "failed"
    [free] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.RETRY, error="x")])
    assert await state_of(store, free) == "available"
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.SNOOZED, delay=60)])
    assert await state_of(store, free) == "scheduled"
