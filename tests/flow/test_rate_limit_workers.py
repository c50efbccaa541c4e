"""A rate limit is global: two worker processes sharing one key admit, together, no
more than the key allows, and each admits part of the jobs."""

from __future__ import annotations

from kiln import JobFilter
from tests.flow.app import LIMIT
from tests.plugins.workers import Admin, StartWorker
from tests.support.flow import crowded_windows
from tests.support.waits import wait_for_sync

JOBS = 30


def test_two_workers_share_one_limit(admin: Admin, start_worker: StartWorker) -> None:
    workers = [start_worker("default=4"), start_worker("default=4")]
    ids = admin.enqueue_many("limited", [{"i": i} for i in range(JOBS)])
    wait_for_sync(lambda: admin.states(ids).get("completed", 0) == JOBS, 60, "all jobs completed")
    stats = [w.stop() for w in workers]

    rows = admin.portal.run(admin.store.job_list(JobFilter(ids=tuple(ids)), limit=1000))
    admitted = sorted(r.admitted_at.timestamp() for r in rows if r.admitted_at is not None)
    started = sorted(r.attempted_at.timestamp() for r in rows if r.attempted_at is not None)
    assert len(admitted) == len(started) == JOBS
    assert crowded_windows(admitted, LIMIT) == []
    # one bucket for both: a token every per/rate seconds after the first. Two limits of
    # their own would have let the two processes through in half the time.
    least = (JOBS - 1) * LIMIT.per / LIMIT.rate
    assert admitted[-1] - admitted[0] >= 0.95 * least, admitted
    assert started[-1] - started[0] >= 0.9 * least, started
    assert [s["admitted"] > 0 for s in stats] == [True, True], stats
    assert sum(s["admitted"] for s in stats) == JOBS
    assert {r.server_id for r in rows} == {w.server_id for w in workers}
