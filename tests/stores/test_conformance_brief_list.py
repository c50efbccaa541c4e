"""Conformance: a brief listing (job_list(brief=True), what the dashboard's lists and
/api/jobs read) leaves out JSON values over 4 KiB, names them in JobRow.cut with their
size, and keeps the last error's message without its traceback; small values and a
full listing are whole (issue 44 N7: 40 jobs with 1 MB of args were 40 MB read)."""

from __future__ import annotations

from kiln._model._job import AttemptError, JobFilter, JobResult, Outcome
from kiln.stores import Store
from kiln.stores._rows import BRIEF_BYTES
from tests.stores.factories import claim, insert, job

BIG = {"blob": "x" * 100_000, "note": "é" * 10}


async def test_large_values_are_cut_and_small_ones_kept(store: Store) -> None:
    big, small = await insert(store, job(args=BIG, queue="brief", metadata={"m": "y" * 5000}),
                              job(args={"n": 1}, queue="brief", metadata={"t": 1}))
    rows = {r.id: r for r in await store.job_list(JobFilter(queue="brief"), brief=True)}
    assert rows[big].args is None and rows[big].metadata == {}
    assert rows[big].cut["args"] > 100_000 and rows[big].cut["metadata"] > 5000
    assert set(rows[big].cut) == {"args", "metadata"}
    assert (rows[small].args, rows[small].metadata, rows[small].cut) == ({"n": 1}, {"t": 1}, {})
    [whole] = await store.job_list(JobFilter(ids=(big,)))
    assert whole.args == BIG and whole.cut == {}


async def test_errors_keep_the_last_message_without_tracebacks(store: Store) -> None:
    [job_id] = await insert(store, job(queue="brieferr", max_attempts=5))
    for attempt in (1, 2):
        [row] = await claim(store, queue="brieferr")
        applied = await store.job_results_apply([JobResult(
            job_id=row.id, server_id="s1", attempt=row.attempt,
            outcome=Outcome.RETRY if attempt == 1 else Outcome.FAILED,
            error=AttemptError(row.attempt, 0.0, f"boom {attempt}", traceback="T" * 3000),
        )])
        assert applied.applied == 1
    [row] = await store.job_list(JobFilter(ids=(job_id,)), brief=True)
    assert row.cut["errors"] > BRIEF_BYTES
    [last] = row.errors
    assert (last.attempt, last.error, last.traceback) == (2, "boom 2", "")
    [whole] = await store.job_list(JobFilter(ids=(job_id,)))
    assert [e.error for e in whole.errors] == ["boom 1", "boom 2"]
    assert whole.errors[-1].traceback == "T" * 3000


async def test_a_value_small_stored_but_long_as_text_is_cut(store: Store) -> None:
    """700 control characters: about 700 bytes stored (PostgreSQL's jsonb), 4,200 as
    JSON text (each written \\u0001): measured as text, so cut; 600 are not."""
    over, under = await insert(store, job(args={"s": "\x01" * 700}, queue="esc"),
                               job(args={"s": "\x01" * 600}, queue="esc"))
    rows = {r.id: r for r in await store.job_list(JobFilter(queue="esc"), brief=True)}
    assert rows[over].args is None and rows[over].cut["args"] > BRIEF_BYTES
    assert rows[under].args == {"s": "\x01" * 600} and rows[under].cut == {}
