"""Checkpoints end to end: set_param persists at once, is fenced, and a job handed
back (SIGTERM) or rescued after its worker was killed (SIGKILL) resumes from it on
another worker process."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln import JobState, filter_of
from tests.plugins.workers import Admin, StartWorker
from tests.support.waits import wait_for_sync

KINDS = ["checkpointed", "checkpointed_sync"]


def _cursor(admin: Admin, job_id: int) -> int:
    return int(admin.job(job_id).params.get("cursor", 0))


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_is_visible_while_the_job_runs(
    admin: Admin, start_worker: StartWorker, kind: str, tmp_path: Path
) -> None:
    job_id = admin.enqueue(kind, {"steps": 8, "step_seconds": 0.15, "log": str(tmp_path / "l")})
    start_worker()
    wait_for_sync(lambda: _cursor(admin, job_id) >= 2, 20, "two checkpoints")
    row = admin.job(job_id)
    assert row.state is JobState.RUNNING and row.params["starts"] == [0]
    wait_for_sync(lambda: admin.job(job_id).state is JobState.COMPLETED, 20, "the job completed")
    assert admin.job(job_id).params == {"starts": [0], "cursor": 8}


@pytest.mark.parametrize("kind", KINDS)
def test_handed_back_job_resumes_from_its_checkpoint(
    admin: Admin, start_worker: StartWorker, kind: str, tmp_path: Path
) -> None:
    log = tmp_path / "fenced.log"
    job_id = admin.enqueue(kind, {"steps": 30, "step_seconds": 0.1, "log": str(log)})
    first = start_worker(shutdown_timeout=0.3)
    wait_for_sync(lambda: _cursor(admin, job_id) >= 4, 20, "a few checkpoints")
    first.stop()  # cancelled after shutdown_timeout and handed back
    row = admin.job(job_id)
    assert row.state is JobState.AVAILABLE and row.attempt == 0  # no attempt used up
    at_hand_back = int(row.params["cursor"])

    second = start_worker()
    wait_for_sync(lambda: admin.job(job_id).state is JobState.COMPLETED, 20, "the job completed")
    row = admin.job(job_id)
    assert row.server_id == second.server_id and row.attempt == 1
    assert row.params["starts"] == [0, at_hand_back] and at_hand_back >= 4
    assert row.params["cursor"] == 30


def test_checkpoint_is_fenced_once_the_attempt_is_no_longer_running_here(
    admin: Admin, start_worker: StartWorker, tmp_path: Path
) -> None:
    log = tmp_path / "fenced.log"
    job_id = admin.enqueue("checkpointed_sync", {"steps": 50, "step_seconds": 0.1, "log": str(log)})
    start_worker()
    wait_for_sync(lambda: _cursor(admin, job_id) >= 2, 20, "two checkpoints")
    assert admin.portal.run(admin.client().cancel(filter_of(ids=[job_id]))) == 1
    wait_for_sync(log.exists, 10, "the handler's next checkpoint was refused")
    _word, attempt, refused = log.read_text().split()
    row = admin.job(job_id)
    assert row.state is JobState.CANCELLED and attempt == "1"
    assert row.params["cursor"] == int(refused) - 1  # the refused value was never written


def test_killed_worker_job_resumes_on_another_worker(
    admin: Admin, start_worker: StartWorker, tmp_path: Path
) -> None:
    job_id = admin.enqueue(
        "checkpointed", {"steps": 40, "step_seconds": 0.1, "log": str(tmp_path / "l")}
    )
    doomed = start_worker()
    wait_for_sync(lambda: _cursor(admin, job_id) >= 4, 20, "a few checkpoints")
    survivor = start_worker()  # not the leader yet: it takes over and then rescues
    doomed.kill()
    doomed.proc.wait(10)
    at_kill = _cursor(admin, job_id)
    # lease (1s) + a new leader's wait (dead_after 6s + heartbeat) + the rescue round
    wait_for_sync(lambda: admin.job(job_id).state is JobState.COMPLETED, 40, "the job completed")
    row = admin.job(job_id)
    assert row.server_id == survivor.server_id and row.attempt == 2, (row.errors, row.params)
    # a checkpoint the worker sent just before the kill can still commit after the
    # process is gone (the database finishes what it received): the job resumes from
    # what the database held after the kill, or from that one checkpoint more
    first_start, resumed_at = row.params["starts"]
    assert first_start == 0 and resumed_at - at_kill in (0, 1) and at_kill >= 4, (
        row.params["starts"], at_kill)
    assert row.params["cursor"] == 40
    assert "stopped sending heartbeats" in (row.errors[0].error if row.errors else "")
