"""Conformance: stored results (a handler's return value kept with its completed job),
read by job_get and by a dependent's job_dependency_results; requeue clears them."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kiln._model._job import JobFilter, JobRow, JobState, Outcome
from kiln._model._results import MAX_RESULT_BYTES_LIMIT
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result

VALUES: list[Any] = [
    {"rows": 3, "nested": {"ok": True, "list": [1, 2.5, None]}},
    "a string, with ünïcode and emoji 🔥",
    [1, "two", {"three": 3}],
    0,
    False,
    "",
    [],
    {},
    12345678901234567,
    -2.75,
]


def stored(row: JobRow, value: Any, outcome: Outcome = Outcome.COMPLETED) -> Any:
    return dataclasses.replace(result(row, outcome), result=json.dumps(value))


async def test_a_completion_stores_its_result_and_get_reads_it(store: Store) -> None:
    ids = await store.job_insert_many([job(args={"i": i}) for i in range(len(VALUES))])
    rows = {r.id: r for r in await claim(store, limit=len(VALUES))}
    assert all(r.result is None for r in rows.values())  # claims never read results
    applied = await store.job_results_apply(
        [stored(rows[i], value) for i, value in zip(ids, VALUES, strict=True)]
    )
    assert applied.applied == len(VALUES)
    for job_id, value in zip(ids, VALUES, strict=True):
        row = await store.job_get(job_id)
        assert row is not None and row.state is JobState.COMPLETED
        assert row.result == value and type(row.result) is type(value)


async def test_a_result_of_none_stores_nothing(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([result(row)])
    done = await store.job_get(job_id)
    assert done is not None and done.state is JobState.COMPLETED and done.result is None


async def test_a_mixed_batch_writes_each_result_to_its_own_job(store: Store) -> None:
    """Results, completions without one, and other outcomes in one batch: every store's
    batched paths (one statement for many completions) keep them apart."""
    ids = await store.job_insert_many([job(args={"i": i}) for i in range(6)])
    rows = await claim(store, limit=6)
    by_id = {r.id: r for r in rows}
    a, b, c, d, e, f = (by_id[i] for i in ids)
    applied = await store.job_results_apply([
        stored(a, {"a": 1}), result(b), stored(c, ["c"]), result(d, Outcome.RETRY, error="x"),
        stored(e, "e"), result(f, Outcome.FAILED, error="y"),
    ])
    assert applied.applied == 6
    got = {i: await store.job_get(i) for i in ids}
    assert [(g.state, g.result) for g in got.values() if g is not None] == [
        (JobState.COMPLETED, {"a": 1}), (JobState.COMPLETED, None),
        (JobState.COMPLETED, ["c"]), (JobState.AVAILABLE, None),
        (JobState.COMPLETED, "e"), (JobState.FAILED, None),
    ]


async def test_a_fenced_result_writes_nothing(store: Store) -> None:
    ids = await store.job_insert_many([job(args={"i": i}) for i in range(2)])
    rows = await claim(store, limit=2)
    fenced = [dataclasses.replace(stored(r, "late"), server_id="other") for r in rows]
    applied = await store.job_results_apply(fenced)
    assert applied.applied == 0
    for job_id in ids:
        row = await store.job_get(job_id)
        assert row is not None and row.state is JobState.RUNNING and row.result is None


async def test_listings_do_not_read_results(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([stored(row, {"big": "x" * 1000})])
    [listed] = await store.job_list(JobFilter(ids=(job_id,)), 10, None)
    assert listed.id == job_id and listed.result is None


async def test_fan_in_reads_its_parts_results(store: Store) -> None:
    """A dependency's completion (the path that releases dependents) stores its result;
    the dependent reads every dependency's, None for one that returned nothing."""
    parts = await store.job_insert_many([job("part", args={"i": i}) for i in range(3)])
    [final] = await insert(store, job("final", depends_on=parts))
    assert await store.job_dependency_results(parts[0]) == {}  # waited on nothing
    rows = {r.id: r for r in await claim(store, limit=3, kinds=("part",))}
    applied = await store.job_results_apply(
        [stored(rows[parts[0]], {"sum": 10}), result(rows[parts[1]]),
         stored(rows[parts[2]], [3])]
    )
    assert applied.applied == 3 and applied.released == {"q": 1}
    results = await store.job_dependency_results(final)
    assert results == {parts[0]: {"sum": 10}, parts[1]: None, parts[2]: [3]}
    assert list(results) == sorted(parts)
    [waiting] = await claim(store, kinds=("final",))
    assert waiting.id == final


async def test_a_deleted_dependency_is_absent_from_the_results(store: Store) -> None:
    parts = await store.job_insert_many([job("part", args={"i": i}) for i in range(2)])
    [final] = await insert(store, job("final", depends_on=parts))
    rows = {r.id: r for r in await claim(store, limit=2, kinds=("part",))}
    await store.job_results_apply([stored(rows[parts[0]], 1), stored(rows[parts[1]], 2)])
    assert await store.jobs_delete(JobFilter(ids=(parts[0],))) == 1
    assert await store.job_dependency_results(final) == {parts[1]: 2}
    assert await store.job_dependency_results(123456789) == {}  # no such job


async def test_a_requeue_clears_the_result(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([stored(row, {"first": True})])
    assert await store.jobs_requeue(JobFilter(ids=(job_id,))) == 1
    again = await store.job_get(job_id)
    assert again is not None and again.state is JobState.AVAILABLE and again.result is None
    [row] = await claim(store)
    await store.job_results_apply([stored(row, {"second": True})])
    done = await store.job_get(job_id)
    assert done is not None and done.result == {"second": True}


async def test_the_largest_result_allowed_is_written(store: Store) -> None:
    """max_result_bytes is at most MAX_RESULT_BYTES_LIMIT (4 MiB): every store writes a
    result that large (MariaDB's default max_allowed_packet is 16 MiB)."""
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    text = '"' + "ü\\\"'" * ((MAX_RESULT_BYTES_LIMIT - 2) // 5) + '"'  # quotes to escape
    assert len(text.encode()) <= MAX_RESULT_BYTES_LIMIT
    applied = await store.job_results_apply([dataclasses.replace(result(row), result=text)])
    assert applied.applied == 1
    done = await store.job_get(job_id)
    assert done is not None and done.result == json.loads(text)
