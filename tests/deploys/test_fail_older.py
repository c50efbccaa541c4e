"""A job failed by kiln.Fail on a newer worker, then read, requeued and run by a kiln
older than Fail, and a job of the same kind rescued by that older kiln after the newer
worker running it died: a rollback from B (knows Fail) to A (does not), on SQLite,
PostgreSQL and MariaDB.

The older kiln is simulated as the deploy sequences simulate it (tests/deploys/
versions.py): A's handler raises a plain error where B's raises kiln.Fail, and A's
servers are this kiln's. What a Fail leaves is a failed row below its attempts with a
"Fail: ..." error; an older kiln must read it as any failed job, requeue it with a full
budget and run it, and rescue a job of the kind as any other.
"""

from __future__ import annotations

import pytest

import kiln
from kiln import JobState
from kiln._server.maintenance.rescuer import REASON
from tests.deploys.plan import Version
from tests.deploys.sequence import Fleet
from tests.deploys.versions import FAIL_REASON, Ledger, build_app
from tests.integration.inprocess import job_of, open_store
from tests.stores.factories import server
from tests.support.waits import wait_for

pytestmark = pytest.mark.deploy_sequence

KIND = "t.bounce"
ATTEMPTS = 3
OLDER = Version("a", {KIND: {"queue": "q", "max_attempts": ATTEMPTS}}, {"q": 2},
                knows_fail=False)
NEWER = Version("b", {KIND: {"queue": "q", "max_attempts": ATTEMPTS}}, {"q": 2})
BOUNCE = {"fail_for_good": True, "seconds": 0.05}
RESCUE = 20.0  # seconds at most: a new leader's first rescue waits dead_after + a beat


def starts(ledger: Ledger, job_id: int) -> list[str]:
    """The versions that started each attempt of the job, in order."""
    return [ledger.versions.get(ln["pid"], "?") for ln in ledger.lines
            if ln["ev"] == "start" and ln["job"] == job_id]


async def test_a_job_failed_by_kiln_fail_is_read_requeued_and_rescued_by_an_older_kiln(
    store_url: str,
) -> None:
    store = await open_store(store_url)
    ledger = Ledger()
    newer, older = build_app(store_url, NEWER, ledger), build_app(store_url, OLDER, ledger)
    fleet = Fleet(store, ledger)
    try:
        # B runs, and fails a job for good at its first attempt
        b = await fleet.start(newer, NEWER)
        failed = int(await newer.aenqueue(KIND, BOUNCE))

        async def failed_for_good() -> kiln.JobRow | None:
            row = await store.job_get(failed)
            return row if row is not None and row.state is JobState.FAILED else None

        await wait_for(failed_for_good, 15, "B to fail the job for good")
        await fleet.stop(b)
        # rolled back: a job of B's producer was running on a B worker that died
        rescued = int(await newer.aenqueue(KIND, BOUNCE))
        await store.server_register(server("b-died", {"q": 2}))
        [claimed] = await store.job_claim("q", [KIND], 1, "b-died")
        assert claimed.id == rescued
        # A, whose kiln does not know Fail, reads B's failure as any failed job
        await fleet.start(older, OLDER)
        client = older.client()
        row = await client.get(failed)
        assert row is not None
        assert (row.state, row.attempt, row.max_attempts) == (JobState.FAILED, 1, ATTEMPTS)
        assert [e.error.split(" (")[0] for e in row.errors] == [f"Fail: {FAIL_REASON}"]
        listed = await client.list(kiln.filter_of(state="failed", kind=KIND))
        assert [r.id for r in listed] == [failed]
        # and requeues it with a full budget, which its handler uses up
        assert await client.requeue(kiln.filter_of(ids=[failed])) == 1

        async def ended(job_id: int) -> kiln.JobRow | None:
            row = await store.job_get(job_id)
            return row if row is not None and row.state is JobState.FAILED \
                and row.attempt == ATTEMPTS else None

        again = await wait_for(lambda: ended(failed), 15, "A to run the requeued job out")
        rescued_row = await wait_for(lambda: ended(rescued), RESCUE,
                                     "A's leader to rescue B's job, and A to run it out")
    finally:
        await fleet.close()
        for app in (newer, older):
            await app.aclose()
    try:
        assert starts(ledger, failed) == ["b"] + ["a"] * ATTEMPTS
        assert again.errors[0].error.startswith(f"Fail: {FAIL_REASON}")  # B's, kept
        assert [e.error.split(":")[0] for e in again.errors[1:]] == ["RuntimeError"] * ATTEMPTS
        # the rescue used one attempt; A ran the others and retried its own errors
        assert starts(ledger, rescued) == ["a"] * (ATTEMPTS - 1)
        assert rescued_row.errors[0].error.startswith(REASON)
        assert [e.error.split(":")[0] for e in rescued_row.errors[1:]] == \
            ["RuntimeError"] * (ATTEMPTS - 1)
        final = await job_of(store, rescued)
        assert final.rescues == 0  # A's own results came after the rescue
    finally:
        await store.close()
