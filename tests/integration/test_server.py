"""The server end to end, in real worker processes, on every store."""

from __future__ import annotations

import time

from kiln import JobState
from tests.plugins.workers import Admin, StartWorker
from tests.support.waits import wait_for_sync


def test_jobs_complete(admin: Admin, start_worker: StartWorker) -> None:
    ids = admin.enqueue_many("noop", [{"i": i} for i in range(300)])
    ids += admin.enqueue_many("sync_noop", [{"i": i} for i in range(100)])
    start_worker("default=8")
    wait_for_sync(lambda: admin.states(ids).get("completed", 0) == len(ids), 30,
                  "all jobs completed")
    job = admin.job(ids[0])
    assert job.attempt == 1 and job.finished_at is not None and job.errors == []


def test_failing_handler_retries_with_growing_waits_then_fails(
    admin: Admin, start_worker: StartWorker
) -> None:
    job_id = admin.enqueue("flaky", {})
    start_worker()
    wait_for_sync(lambda: admin.job(job_id).state is JobState.FAILED, 30, "job failed for good")
    job = admin.job(job_id)
    assert job.attempt == 3
    assert [e.attempt for e in job.errors] == [1, 2, 3]
    assert all("flaky failure on attempt" in e.error for e in job.errors)
    assert all("RuntimeError" in e.traceback for e in job.errors)
    gaps = [b.at - a.at for a, b in zip(job.errors, job.errors[1:], strict=False)]
    # Exponential(0.3, 5): waits drawn in [0.15, 0.3] then [0.3, 0.6]
    assert gaps[0] >= 0.15 and gaps[1] >= 0.3, gaps


def test_timeout_fails_the_attempt(admin: Admin, start_worker: StartWorker) -> None:
    job_id = admin.enqueue("slow", {})
    start_worker()
    wait_for_sync(lambda: admin.job(job_id).state is JobState.FAILED, 20, "timed-out job failed")
    job = admin.job(job_id)
    assert "timed out after 0.5s" in job.errors[0].error


def test_sync_handler_that_sleeps_does_not_stall_other_jobs(
    admin: Admin, start_worker: StartWorker
) -> None:
    sleeper = admin.enqueue("sync_sleep", {"seconds": 4})
    start_worker("default=4")
    wait_for_sync(lambda: admin.job(sleeper).state is JobState.RUNNING, 10, "sleeper running")
    ids = admin.enqueue_many("noop", [{} for _ in range(100)])
    began = time.monotonic()
    wait_for_sync(lambda: admin.states(ids).get("completed", 0) == 100, 10, "noops completed")
    took = time.monotonic() - began
    assert admin.job(sleeper).state is JobState.RUNNING, "noops should finish while it sleeps"
    assert took < 3.5


def test_snooze_and_cancel_outcomes(admin: Admin, start_worker: StartWorker) -> None:
    snoozed = admin.enqueue("snoozer", {})
    cancelled = admin.enqueue("canceller", {})
    start_worker()
    wait_for_sync(lambda: admin.job(snoozed).state is JobState.COMPLETED, 15, "snoozed job done")
    wait_for_sync(lambda: admin.job(cancelled).state is JobState.CANCELLED, 15, "job cancelled")
    assert admin.job(snoozed).attempt == 1, "a snooze gives its attempt back"
    assert admin.job(snoozed).params == {"snoozed": True}
    assert "not needed any more" in admin.job(cancelled).errors[0].error


def test_sigterm_hands_a_long_job_back_and_another_worker_runs_it(
    admin: Admin, start_worker: StartWorker
) -> None:
    job_id = admin.enqueue("long", {"seconds": 3})
    first = start_worker(shutdown_timeout=0.5, kill_grace=0.3)
    wait_for_sync(lambda: admin.job(job_id).state is JobState.RUNNING, 10, "job running")
    assert admin.job(job_id).server_id == first.server_id
    began = time.monotonic()
    first.terminate()
    assert first.wait(10) == 0
    stopped_after = time.monotonic() - began
    assert stopped_after < 0.5 + 0.3 + 2.0, stopped_after
    job = admin.job(job_id)
    assert job.state is JobState.AVAILABLE and job.attempt == 0, (job.state, job.attempt)
    second = start_worker()
    wait_for_sync(lambda: admin.job(job_id).state is JobState.COMPLETED, 15, "job completed")
    job = admin.job(job_id)
    assert job.server_id == second.server_id and job.attempt == 1 and job.errors == []


def test_a_job_that_ignores_cancellation_does_not_hold_shutdown(
    admin: Admin, start_worker: StartWorker
) -> None:
    stubborn = admin.enqueue("stubborn", {"seconds": 30})
    sleeper = admin.enqueue("sync_sleep", {"seconds": 30})
    worker = start_worker(shutdown_timeout=0.5, kill_grace=0.5, dead_after=8.0)
    wait_for_sync(
        lambda: admin.states([stubborn, sleeper]).get("running", 0) == 2, 10, "both running"
    )
    began = time.monotonic()
    worker.terminate()
    assert worker.wait(15) == 0
    took = time.monotonic() - began
    assert took < 0.5 + 0.5 + 1.5, f"run() held shutdown for {took:.2f}s"
    for job_id in (stubborn, sleeper):
        job = admin.job(job_id)
        assert job.state is JobState.AVAILABLE and job.attempt == 0
