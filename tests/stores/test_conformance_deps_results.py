"""Conformance: completions of jobs with and without dependents in one batch, and a
dependent inserted while its dependency runs (stores may skip the release of
dependents for jobs that have none: these must still be released)."""

from __future__ import annotations

import asyncio

from kiln._model._job import Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, state_of


async def test_batch_mixing_jobs_with_and_without_dependents(store: Store) -> None:
    [a, b, c, d] = await insert(store, job(), job(), job(), job())
    [e] = await insert(store, job(kind="e", depends_on=[b]))
    [f] = await insert(store, job(kind="f", depends_on=[c, d]))
    rows = await claim(store, limit=4)
    assert sorted(r.id for r in rows) == [a, b, c, d]
    by_id = {r.id: r for r in rows}
    outcomes = [result(by_id[a]), result(by_id[b]), result(by_id[c]),
                result(by_id[d], Outcome.RETRY, delay=0.0, error="x")]
    applied = await store.job_results_apply(outcomes)
    assert applied.applied == 4
    assert applied.released == {"q": 2}  # e released; d retried straight to available
    assert await state_of(store, e) == "available"
    assert await state_of(store, f) == "awaiting"  # d is still to do
    [rd] = await claim(store)
    applied = await store.job_results_apply([result(rd)])
    assert applied.applied == 1 and applied.released == {"q": 1}
    assert await state_of(store, f) == "available"


async def test_fenced_completion_of_a_job_with_dependents_applies_nothing(store: Store) -> None:
    [a] = await insert(store, job())
    [c] = await insert(store, job(kind="c", depends_on=[a]))
    [row] = await claim(store)
    applied = await store.job_results_apply([result(row, server="someone-else")])
    assert applied.applied == 0 and applied.released == {}
    assert await state_of(store, a) == "running" and await state_of(store, c) == "awaiting"


async def test_dependent_inserted_while_its_dependency_runs(store: Store) -> None:
    [a] = await insert(store, job())
    [row] = await claim(store)
    [c] = await insert(store, job(kind="c", depends_on=[a]))
    assert await state_of(store, c) == "awaiting"
    applied = await store.job_results_apply([result(row)])
    assert applied.applied == 1 and applied.released == {"q": 1}
    assert await state_of(store, c) == "available"


async def test_dependent_inserted_while_its_dependency_completes(
    store: Store, other_store: Store
) -> None:
    """Whichever commits first, the dependent ends up available, never stuck awaiting."""
    for _ in range(8):
        [a] = await insert(store, job())
        [row] = await claim(store)
        _applied, [c] = await asyncio.gather(
            store.job_results_apply([result(row)]),
            other_store.job_insert_many([job(kind="c", depends_on=[a])]),
        )
        assert await state_of(store, c) == "available"
        [rc] = await store.job_claim("q", ["c"], 1, "s1")
        assert (await store.job_results_apply([result(rc)])).applied == 1
