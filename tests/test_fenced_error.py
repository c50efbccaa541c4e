"""A refused checkpoint raises kiln.FencedError, part of the error tree: it names the
job, the attempt and the server it no longer runs on, survives pickling (a process
pool's handler raises it across processes), and writes nothing to ``job.params``."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle

import pytest

import kiln
from kiln._server._handle import Job
from tests.support.parts import row


async def test_a_refused_checkpoint_raises_a_fenced_error_naming_job_attempt_server() -> None:
    written: list[tuple[str, object]] = []

    async def refuse(r: kiln.JobRow, name: str, value: object) -> bool:
        written.append((name, value))
        return False

    job_row = dataclasses.replace(row(7), attempt=2, server_id="web-1-abc")
    job = Job(job_row, refuse, asyncio.get_running_loop())
    with pytest.raises(kiln.FencedError) as caught:
        await job.set_param("cursor", 5)
    error = caught.value
    assert isinstance(error, kiln.KilnError)
    assert (error.job_id, error.attempt, error.server_id) == (7, 2, "web-1-abc")
    assert "job 7 attempt 2" in str(error) and "web-1-abc" in str(error)
    assert "cursor" not in job.params and written == [("cursor", 5)]

    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.job_id, again.attempt, again.server_id, str(again)) == (
        kiln.FencedError, 7, 2, "web-1-abc", str(error))
