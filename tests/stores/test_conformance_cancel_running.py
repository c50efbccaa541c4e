"""Conformance: cancelling running jobs records who did it, and tells their servers.

``jobs_cancel(filter, actor)`` marks a running job cancelled at once and records the
actor in its errors; ``jobs_cancel_requested(ids)`` is the server's read of which of
its running jobs were cancelled (with the seconds since, by the database clock); the
attempt's late result changes nothing, ends the attempt, and the job is never retried.
On PostgreSQL the cancel itself notifies the servers (tests/stores/test_store_notify.py
style: on the shared ``kiln`` channel).
"""

from __future__ import annotations

import asyncio

import pytest

from kiln._model._job import JobFilter, JobState, Outcome
from kiln._model._wakeup import CANCEL_PAYLOAD
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, server, state_of
from tests.support.waits import wait_for


async def test_cancel_records_the_actor_and_the_running_server(store: Store) -> None:
    await store.server_register(server("s1"))
    [running_id, waiting_id] = await insert(store, job(), job(queue="other"))
    [row] = await claim(store, server="s1")
    n = await store.jobs_cancel(JobFilter(ids=(running_id, waiting_id)), actor="cli:alice")
    assert n == 2
    running = await store.job_get(running_id)
    waiting = await store.job_get(waiting_id)
    assert running is not None and waiting is not None
    assert running.state is JobState.CANCELLED and running.attempt == row.attempt == 1
    record = running.errors[-1]
    assert record.error == "Cancelled by cli:alice"
    assert record.attempt == 1 and record.server_id == "s1" and record.at > 0
    assert waiting.errors[-1].error == "Cancelled by cli:alice"
    assert waiting.errors[-1].server_id is None and waiting.errors[-1].attempt == 0


async def test_cancel_without_an_actor_records_nothing(store: Store) -> None:
    [job_id] = await insert(store, job())
    assert await store.jobs_cancel(JobFilter(ids=(job_id,))) == 1
    row = await store.job_get(job_id)
    assert row is not None and row.errors == []


async def test_cancel_requested_names_the_cancelled_running_jobs(store: Store) -> None:
    await store.server_register(server("s1"))
    ids = await insert(store, job(), job(), job())
    rows = await claim(store, server="s1")
    assert sorted(r.id for r in rows) == ids
    assert await store.jobs_cancel_requested(ids) == []
    assert await store.jobs_cancel_requested([]) == []
    await store.jobs_cancel(JobFilter(ids=(ids[0], ids[2])), actor="api")
    await asyncio.sleep(0.05)
    found = sorted(await store.jobs_cancel_requested([*ids, 10**9]), key=lambda r: r.id)
    assert [(r.id, r.attempt, r.server_id) for r in found] == [
        (ids[0], 1, "s1"), (ids[2], 1, "s1")]
    assert all(0.04 <= r.age < 5.0 for r in found), found


async def test_the_late_result_ends_the_attempt_and_changes_nothing(store: Store) -> None:
    await store.server_register(server("s1"))
    [job_id] = await insert(store, job(max_attempts=3))
    [row] = await claim(store, server="s1")
    await store.jobs_cancel(JobFilter(ids=(job_id,)), actor="api")
    for outcome in (Outcome.CANCELLED, Outcome.RETRY, Outcome.COMPLETED):
        late = result(row, outcome, error="late")
        assert (await store.job_results_apply([late])).applied == 0
    after = await store.job_get(job_id)
    assert after is not None and after.state is JobState.CANCELLED
    assert after.attempt == 1  # no more attempts used, nothing retried
    assert [e.error for e in after.errors] == ["Cancelled by api"]
    # the attempt has ended: nothing to stop any more, and a requeue may run it again
    assert await store.jobs_cancel_requested([job_id]) == []
    assert await claim(store, server="s2") == []
    assert await store.jobs_requeue(JobFilter(ids=(job_id,))) == 1


async def test_cancelling_finished_jobs_changes_nothing(store: Store) -> None:
    await store.server_register(server("s1"))
    [done_id, open_id] = await insert(store, job(), job(queue="other"))
    [row] = await claim(store, server="s1")
    assert (await store.job_results_apply([result(row)])).applied == 1
    assert await store.jobs_cancel(JobFilter(ids=(done_id,)), actor="api") == 0
    assert await store.jobs_cancel(JobFilter(ids=(done_id, open_id)), actor="api") == 1
    done = await store.job_get(done_id)
    assert done is not None and done.state is JobState.COMPLETED and done.errors == []
    assert await store.jobs_cancel(JobFilter(ids=(open_id,)), actor="api") == 0
    assert await state_of(store, open_id) == "cancelled"


async def test_dependents_of_a_cancelled_running_job_keep_waiting(store: Store) -> None:
    await store.server_register(server("s1"))
    [dep_id] = await insert(store, job())
    [child_id] = await insert(store, job(depends_on=(dep_id,)))
    [row] = await claim(store, server="s1")
    await store.jobs_cancel(JobFilter(ids=(dep_id,)), actor="api")
    assert (await store.job_results_apply([result(row)])).applied == 0
    assert await state_of(store, child_id) == "awaiting"


async def test_cancel_of_a_running_job_notifies(store: Store) -> None:
    if not store.capabilities.listen_notify:
        pytest.skip("store has no notifications: the client publishes on its Bus")
    got: list[str] = []
    await store.listen(lambda _channel, payload: got.append(payload))
    await store.server_register(server("s1"))
    [queued_id, running_id] = await insert(store, job(queue="other"), job())
    await claim(store, server="s1")
    await store.jobs_cancel(JobFilter(ids=(queued_id,)), actor="api")
    await asyncio.sleep(0.1)
    # other tests share the channel: only the absence right after is ours to check
    before = got.count(CANCEL_PAYLOAD)
    await store.jobs_cancel(JobFilter(ids=(running_id,)), actor="api")

    async def notified() -> bool:
        return got.count(CANCEL_PAYLOAD) > before

    await wait_for(notified, 2.0, "notified()")
