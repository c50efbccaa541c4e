"""`kiln jobs show` prints a completed job's stored result; listings leave it out."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime

from kiln._model import _wire as wire
from kiln._model._job import JobFilter, JobRow, JobState, NewJob
from kiln.cli import _output as out
from kiln.stores import store_from_url
from tests.stores.factories import result
from tests.support.cli import ok, run_cli
from tests.support.cli import url as url


def completed(url: str, values: list[object]) -> list[int]:
    """Jobs completed with ``values`` as their results (None: none stored)."""

    async def run() -> list[int]:
        store = store_from_url(url)
        await store.open()
        try:
            ids = await store.job_insert_many(
                [NewJob(kind="k", args={"i": i}, queue="q") for i in range(len(values))]
            )
            rows = {r.id: r for r in await store.job_claim("q", ["k"], 10, "s1")}
            await store.job_results_apply([
                dataclasses.replace(result(rows[i]),
                                    result=None if v is None else json.dumps(v))
                for i, v in zip(ids, values, strict=True)
            ])
            assert len(await store.job_list(JobFilter(ids=tuple(ids)), 10, None)) == len(ids)
            return ids
        finally:
            await store.close()

    return asyncio.run(run())


def test_jobs_show_prints_the_result(url: str) -> None:
    """One command per store (a CLI process takes seconds on a loaded machine); the
    JSON form is checked below, and what the store returns by the conformance suite."""
    [job_id] = completed(url, [{"rows": 3, "name": "ü"}])
    shown = ok(run_cli("--database-url", url, "jobs", "show", str(job_id)))
    label, value = shown.splitlines()[-1].split(maxsplit=1)
    assert label == "result" and json.loads(value) == {"rows": 3, "name": "ü"}


def test_a_job_without_a_result_and_listings() -> None:
    row = JobRow(
        id=1, queue="q", kind="k", state=JobState.COMPLETED, args={}, params={}, metadata={},
        priority=0, run_at=datetime.now(UTC), attempt=1, max_attempts=1, timeout=None,
        backoff=None, errors=[], created_at=datetime.now(UTC), admitted_at=None,
        attempted_at=None, finished_at=None, server_id=None, rate_key=None, rescues=0,
    )
    assert out.job_details(row).splitlines()[-1].split() == ["result", "-"]
    assert "result" not in wire.job_json(row)  # a listing did not read it: not a null
    assert wire.job_json(row, result=True)["result"] is None
    row.result = "42"
    assert out.job_details(row).splitlines()[-1].split() == ["result", '"42"']  # quoted
