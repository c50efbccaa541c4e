"""``kiln jobs requeue --state failed`` bound by --max-id and --finished-before: a script
that looked at the failed jobs requeues those, not the ones that failed since."""

from __future__ import annotations

import asyncio
from datetime import datetime

from kiln.stores import store_from_url
from tests.support.cli import assert_fails, enqueue, fail_jobs, job_json, ok, run_cli, url

__all__ = ["url"]  # the fixture, re-used


async def _now(url: str) -> datetime:
    store = store_from_url(url)
    await store.open()
    try:
        return await store.now()
    finally:
        await store.close()


def test_requeue_acts_only_within_its_bounds(url: str) -> None:
    ids = [enqueue(url, "email.send", "--queue", "mail") for _ in range(3)]
    [first] = asyncio.run(fail_jobs(url, "mail", 1))
    seen = asyncio.run(_now(url)).isoformat()
    later = asyncio.run(fail_jobs(url, "mail", 2))
    out = ok(run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                     "--finished-before", seen, "--max-id", str(max(ids))))
    assert out.strip() == "requeued 1 job"
    assert job_json(url, first)["state"] == "available"
    assert {job_json(url, i)["state"] for i in later} == {"failed"}
    out = ok(run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                     "--max-id", str(min(later))))
    assert out.strip() == "requeued 1 job"
    assert_fails(run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                         "--finished-before", "2026-12-03T09:00:00"), 2, "time zone")
