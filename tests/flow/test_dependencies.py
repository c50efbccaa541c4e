"""Dependencies end to end with a worker process: chains, fan-ins, and a failed
dependency that keeps its dependents awaiting until it is requeued or deleted."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path

from kiln import EnqueueResult, JobState, filter_of
from tests.plugins.workers import Admin, StartWorker
from tests.support.waits import wait_for_sync


def _done(admin: Admin, ids: Sequence[int]) -> bool:
    return admin.states(ids).get("completed", 0) == len(ids)


def _after(admin: Admin, first: int, then: int) -> bool:
    """``then`` started only after ``first`` had finished."""
    a, b = admin.job(first), admin.job(then)
    assert a.finished_at is not None and b.attempted_at is not None
    return bool(b.attempted_at >= a.finished_at)


def test_chain_runs_in_order(admin: Admin, start_worker: StartWorker) -> None:
    client = admin.client()
    ids = admin.portal.run(client.enqueue_chain(
        [("step", {"n": i, "seconds": 0.05}) for i in range(4)]
    ))
    assert [admin.job(i).state for i in ids] == [JobState.AVAILABLE] + [JobState.AWAITING] * 3
    assert admin.job(ids[2]).depends_on == [ids[1]]
    start_worker("default=4")
    wait_for_sync(lambda: _done(admin, ids), 20, "the chain completed")
    assert all(_after(admin, a, b) for a, b in itertools.pairwise(ids))


def test_fan_in_waits_for_every_part(admin: Admin, start_worker: StartWorker) -> None:
    client = admin.client()
    parts, final = admin.portal.run(client.enqueue_fan_in(
        [("step", {"n": i, "seconds": 0.05 * i}) for i in range(5)], ("step", {"final": True})
    ))
    assert admin.job(final).state is JobState.AWAITING
    assert sorted(admin.job(final).depends_on) == sorted(parts)
    start_worker("default=8")
    wait_for_sync(lambda: _done(admin, [*parts, final]), 20, "the fan-in completed")
    assert all(_after(admin, p, final) for p in parts)


def _failed_chain(admin: Admin, start_worker: StartWorker, flag: Path) -> list[EnqueueResult]:
    """A chain whose first job fails for good; returns its ids once that happened."""
    client = admin.client()
    ids = admin.portal.run(client.enqueue_chain(
        [("step", {"fail_unless": str(flag)}), ("step", {}), ("step", {})]
    ))
    start_worker("default=4")
    wait_for_sync(lambda: admin.job(ids[0]).state is JobState.FAILED, 20, "the dependency failed")
    time.sleep(1.0)  # five poll intervals: nothing may release the dependents meanwhile
    assert [admin.job(i).state for i in ids[1:]] == [JobState.AWAITING] * 2
    return ids


def test_failed_dependency_holds_dependents_until_requeued(
    admin: Admin, start_worker: StartWorker, tmp_path: Path
) -> None:
    flag = tmp_path / "fixed"
    ids = _failed_chain(admin, start_worker, flag)
    flag.touch()  # whatever made it fail is fixed
    assert admin.portal.run(admin.client().requeue(filter_of(ids=[ids[0]]))) == 1
    wait_for_sync(lambda: _done(admin, ids), 20, "the requeued chain completed")
    assert admin.job(ids[0]).attempt == 1  # requeued with a fresh budget
    assert _after(admin, ids[0], ids[1]) and _after(admin, ids[1], ids[2])


def test_failed_dependency_deleted_releases_dependents(
    admin: Admin, start_worker: StartWorker, tmp_path: Path
) -> None:
    ids = _failed_chain(admin, start_worker, tmp_path / "never")
    assert admin.portal.run(admin.client().delete(filter_of(ids=[ids[0]]))) == 1
    wait_for_sync(lambda: _done(admin, ids[1:]), 20, "the dependents of the deleted job completed")
    assert admin.portal.run(admin.store.job_get(ids[0])) is None


def test_fan_in_with_a_failed_part_waits_for_its_requeue(
    admin: Admin, start_worker: StartWorker, tmp_path: Path
) -> None:
    flag = tmp_path / "fixed"
    client = admin.client()
    parts, final = admin.portal.run(client.enqueue_fan_in(
        [("step", {}), ("step", {"fail_unless": str(flag)}), ("step", {})], ("step", {})
    ))
    start_worker("default=4")
    wait_for_sync(lambda: admin.job(parts[1]).state is JobState.FAILED, 20, "one part failed")
    wait_for_sync(lambda: _done(admin, [parts[0], parts[2]]), 20, "the other parts completed")
    time.sleep(0.6)
    assert admin.job(final).state is JobState.AWAITING
    flag.touch()
    admin.portal.run(client.requeue(filter_of(ids=[parts[1]])))
    wait_for_sync(lambda: _done(admin, [final]), 20, "the final job completed")
