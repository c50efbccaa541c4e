"""Conformance: a job cancelled while running is not requeued while its attempt may still
be running.

Cancelling a running job does not stop its handler. Until that attempt has ended (its
server wrote the attempt's result, which the cancellation fences off) or its server is
dead (no heartbeat for ``dead_after``, or deregistered), ``jobs_requeue`` leaves the
job cancelled: a requeue would start a second run while the first still runs.
"""

from __future__ import annotations

from kiln._model._job import JobFilter, JobResult, JobRow, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, server, state_of
from tests.support.waits import wait_for


async def _cancelled_while_running(store: Store, server_id: str = "s1") -> tuple[int, JobRow]:
    [job_id] = await insert(store, job())
    [row] = await claim(store, server=server_id)
    assert await store.jobs_cancel(JobFilter(ids=(job_id,))) == 1
    assert await state_of(store, job_id) == "cancelled"
    return job_id, row


async def test_requeue_waits_for_the_late_result_of_a_live_server(store: Store) -> None:
    await store.server_register(server("s1"))
    job_id, row = await _cancelled_while_running(store)
    only = JobFilter(ids=(job_id,))
    assert await store.jobs_requeue(only) == 0  # s1 is alive and may still run it
    assert await store.jobs_requeue(JobFilter(states=(JobState.CANCELLED,))) == 0
    assert await state_of(store, job_id) == "cancelled"
    assert await claim(store, server="s2") == []

    # a result of another attempt or server says nothing about this attempt
    other = JobResult(job_id=job_id, server_id="s2", attempt=row.attempt,
                      outcome=Outcome.COMPLETED)
    assert (await store.job_results_apply([other])).applied == 0
    assert await store.jobs_requeue(only) == 0

    # the handler finished: its result is fenced off (the job stays cancelled) and ends
    # the attempt, so the job may run again
    late = result(row, Outcome.COMPLETED)
    assert (await store.job_results_apply([late])).applied == 0
    assert await state_of(store, job_id) == "cancelled"
    assert await store.jobs_requeue(only) == 1
    [again] = await claim(store, server="s2")
    assert again.id == job_id and again.attempt == 1


async def test_requeue_after_the_server_is_dead_or_gone(store: Store) -> None:
    await store.server_register(server("s1"))
    await store.server_register(server("s2"))
    silent, _ = await _cancelled_while_running(store, "s1")
    gone, _ = await _cancelled_while_running(store, "s2")
    never, _ = await _cancelled_while_running(store, "unregistered")
    assert await store.jobs_requeue(JobFilter(ids=(never,))) == 1  # no such server runs it
    assert await store.jobs_requeue(JobFilter(ids=(gone,))) == 0
    await store.server_deregister("s2")  # a clean exit ends or hands back every attempt
    assert await store.jobs_requeue(JobFilter(ids=(gone,))) == 1

    assert await store.jobs_requeue(JobFilter(ids=(silent,)), dead_after=60.0) == 0

    async def dead() -> bool:  # s1 stops heartbeating: dead once dead_after has passed
        return await store.jobs_requeue(JobFilter(ids=(silent,)), dead_after=0.2) == 1

    await wait_for(dead, 3.0, "dead()")
    assert [await state_of(store, i) for i in (silent, gone, never)] == ["available"] * 3


async def test_other_cancelled_jobs_requeue_at_once(store: Store) -> None:
    await store.server_register(server("s1"))
    [waiting] = await insert(store, job())
    assert await store.jobs_cancel(JobFilter(ids=(waiting,))) == 1  # never ran
    [ran_id] = await insert(store, job())
    [row] = await claim(store, server="s1")
    # the handler cancelled itself: the attempt ended with its result
    assert (await store.job_results_apply([result(row, Outcome.CANCELLED)])).applied == 1
    assert await state_of(store, ran_id) == "cancelled"
    assert await store.jobs_requeue(JobFilter(ids=(waiting, ran_id))) == 2
