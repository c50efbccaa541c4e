"""Conformance: applying results with fencing, and parameter checkpoints. A snooze
waits on the database clock (``clock.advance``, tests/stores/clock.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kiln._model._job import JobState, Outcome
from kiln.stores import Store
from tests.stores.clock import Clock, clockable
from tests.stores.factories import claim, insert, job, result


@pytest.fixture
def store_url(store_url: str) -> Iterator[str]:
    yield from clockable(store_url)


async def test_complete(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    applied = await store.job_results_apply([result(row)])
    assert applied.applied == 1 and applied.released == {}
    done = await store.job_get(job_id)
    assert done is not None and done.state is JobState.COMPLETED
    assert done.finished_at is not None and done.attempt == 1


async def test_every_outcome_moves_to_its_state(store: Store) -> None:
    await store.job_insert_many([job(args={"i": i}) for i in range(6)])
    rows = await claim(store)
    outcomes = [Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED, Outcome.RETRY,
                Outcome.SNOOZED, Outcome.HANDED_BACK]
    applied = await store.job_results_apply(
        [result(r, o, delay=60 if o in (Outcome.RETRY, Outcome.SNOOZED) else 0)
         for r, o in zip(rows, outcomes, strict=True)]
    )
    assert applied.applied == 6
    assert applied.released == {"q": 1}  # the hand-back is available again at once
    after = [await store.job_get(r.id) for r in rows]
    assert [a.state if a else None for a in after] == [
        JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
        JobState.SCHEDULED, JobState.SCHEDULED, JobState.AVAILABLE,
    ]
    assert [a.attempt if a else None for a in after] == [1, 1, 1, 1, 0, 0]
    assert all(a is not None and a.finished_at is not None for a in after[:3])
    assert all(a is not None and a.finished_at is None and a.server_id is None for a in after[3:])
    now = await store.now()
    assert after[3] is not None and (after[3].run_at - now).total_seconds() > 50


async def test_retry_without_delay_is_available_again(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    applied = await store.job_results_apply([result(row, Outcome.RETRY, error="boom")])
    assert applied.released == {"q": 1}
    [again] = await claim(store, server="s2")
    assert again.id == job_id and again.attempt == 2 and again.server_id == "s2"


async def test_errors_are_appended_per_attempt(store: Store) -> None:
    [job_id] = await insert(store, job())
    for n in (1, 2, 3):
        [row] = await claim(store)
        outcome = Outcome.FAILED if n == 3 else Outcome.RETRY
        await store.job_results_apply([result(row, outcome, error=f"boom {n}")])
    row_ = await store.job_get(job_id)
    assert row_ is not None and row_.state is JobState.FAILED
    assert [(e.attempt, e.error) for e in row_.errors] == [(1, "boom 1"), (2, "boom 2"),
                                                          (3, "boom 3")]
    assert row_.last_error is not None and row_.last_error.error == "boom 3"


async def test_apply_says_which_results_applied(store: Store) -> None:
    """Per result: the completer counts, logs and keeps the ones that applied nothing."""
    await store.job_insert_many([job(args={"i": i}) for i in range(4)])
    a, b, c, d = await claim(store)
    fenced = type(result(b))(job_id=b.id, server_id="other", attempt=b.attempt,
                             outcome=Outcome.COMPLETED)
    applied = await store.job_results_apply(
        [result(a), fenced, result(c, Outcome.RETRY, error="x"), result(d, Outcome.HANDED_BACK)]
    )
    assert applied.applied_ids == frozenset({a.id, c.id, d.id}) and applied.applied == 3
    again = await store.job_results_apply([result(a)])  # already completed: applies nothing
    assert again.applied_ids == frozenset() and again.applied == 0
    [parent] = await insert(store, job("k2"))
    await insert(store, job("k2", depends_on=[parent]))
    [row] = await claim(store, kinds=("k2",))
    released = await store.job_results_apply([result(row)])  # the path with dependents
    assert released.applied_ids == frozenset({parent}) and released.released == {"q": 1}


async def test_results_are_fenced_by_server_and_attempt(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store, server="s1")
    stale_server = result(row, server="other")
    stale_attempt = result(row)
    stale_attempt = type(stale_attempt)(
        job_id=row.id, server_id="s1", attempt=row.attempt + 1, outcome=Outcome.COMPLETED
    )
    applied = await store.job_results_apply([stale_server, stale_attempt])
    assert applied.applied == 0
    unchanged = await store.job_get(job_id)
    assert unchanged is not None and unchanged.state is JobState.RUNNING
    # the job is rescued and claimed again: the first attempt's late result changes nothing
    assert (await store.job_results_apply([result(row, Outcome.RETRY, rescued=True)])).applied
    [second] = await claim(store, server="s2")
    late = await store.job_results_apply([result(row, Outcome.COMPLETED, server="s1")])
    assert late.applied == 0
    current = await store.job_get(job_id)
    assert current is not None and current.state is JobState.RUNNING
    assert current.server_id == "s2" and current.attempt == second.attempt == 2


async def test_result_for_a_job_no_longer_running_is_ignored(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    assert (await store.job_results_apply([result(row)])).applied == 1
    assert (await store.job_results_apply([result(row, Outcome.FAILED)])).applied == 0
    assert (await store.job_results_apply([])).applied == 0
    done = await store.job_get(job_id)
    assert done is not None and done.state is JobState.COMPLETED


async def test_rescues_count_rescued_results_and_reset_otherwise(store: Store) -> None:
    [job_id] = await insert(store, job())
    for _ in range(2):
        [row] = await claim(store)
        await store.job_results_apply([result(row, Outcome.RETRY, rescued=True)])
    rescued = await store.job_get(job_id)
    assert rescued is not None and rescued.rescues == 2 and rescued.attempt == 2
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.RETRY)])
    reset = await store.job_get(job_id)
    assert reset is not None and reset.rescues == 0


async def test_a_batch_applies_each_result_on_its_own(store: Store) -> None:
    await store.job_insert_many([job(args={"i": i}) for i in range(20)])
    rows = await claim(store, limit=20)
    batch = [result(r) if r.id % 2 else result(r, server="stranger") for r in rows]
    applied = await store.job_results_apply(batch)
    assert applied.applied == sum(1 for r in rows if r.id % 2)


async def test_param_checkpoint_is_fenced_and_survives_the_attempt(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    assert await store.job_param_set(job_id, "s1", row.attempt, "cursor", 1234)
    assert await store.job_param_set(job_id, "s1", row.attempt, "odd key.$x", {"a": [1]})
    assert not await store.job_param_set(job_id, "other", row.attempt, "cursor", 9)
    assert not await store.job_param_set(job_id, "s1", row.attempt + 1, "cursor", 9)
    await store.job_results_apply([result(row, Outcome.HANDED_BACK)])
    assert not await store.job_param_set(job_id, "s1", row.attempt, "cursor", 9)
    [again] = await claim(store)
    assert again.params == {"cursor": 1234, "odd key.$x": {"a": [1]}}
    assert again.attempt == 1  # the hand-back gave the attempt back


async def test_release_due_makes_delayed_jobs_available_on_time(
    store: Store, clock: Clock
) -> None:
    # a delay of 30 s on the moved clock: not yet due however slowly a loaded machine
    # gets to the first release
    [job_id] = await insert(store, job(delay=30))
    first = await store.jobs_release_due()
    assert first.released == {}
    assert first.next_at is not None and 0.0 < first.next_at <= 30
    assert await claim(store) == []
    await clock.advance(30)
    assert (await store.jobs_release_due()).released == {"q": 1}
    [row] = await claim(store)
    assert row.id == job_id
    empty = await store.jobs_release_due()
    assert empty.released == {} and empty.next_at is None


async def test_snoozed_job_comes_back_after_its_delay(store: Store, clock: Clock) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.SNOOZED, delay=0.2)])
    assert (await store.job_get(job_id)).state is JobState.SCHEDULED  # type: ignore[union-attr]
    await clock.advance(0.25)
    assert (await store.jobs_release_due()).released == {"q": 1}
    [again] = await claim(store)
    assert again.attempt == 1
