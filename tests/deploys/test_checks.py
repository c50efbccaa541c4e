"""The deploy tier's checks catch what they are there to catch.

Hand-made runs, no database: a clean one, then one per kind of violation, so that a
sequence that reports nothing has checked something (tests/chaos/test_ledger.py does
the same for the ledger these checks start from).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import kiln
from kiln import JobRow, JobState
from kiln._model._job import AttemptError
from tests.deploys.checks import most_at_once, violations
from tests.deploys.plan import (
    COMPLETED_OR_REPORTED,
    FAILED,
    FAILED_FOR_GOOD,
    AtOnce,
    Cap,
    Case,
    Enqueue,
    Rate,
    Version,
)
from tests.deploys.sequence import Run
from tests.deploys.versions import FAIL_REASON, Ledger

V = Version("a", {"k": {}}, {"q": 1})


def row(job: int, state: JobState = JobState.COMPLETED, kind: str = "k", queue: str = "q",
        attempt: int = 1, max_attempts: int = 25, args: Any = None,
        admitted: float | None = None) -> JobRow:
    at = datetime.fromtimestamp(0, UTC)
    return JobRow(
        id=job, queue=queue, kind=kind, state=state, args=args or {}, params={}, metadata={},
        priority=0, run_at=at, attempt=attempt, max_attempts=max_attempts, timeout=None,
        backoff=None, errors=[], created_at=at,
        admitted_at=None if admitted is None else datetime.fromtimestamp(admitted, UTC),
        attempted_at=at, finished_at=datetime.fromtimestamp(100, UTC), server_id="s1",
        rate_key=None, rescues=0,
    )


def ran(ledger: Ledger, job: int, start: float, end: float, attempt: int = 1) -> None:
    ledger.lines += [
        {"t": start, "pid": 1, "ev": "start", "job": job, "attempt": attempt, "server": "s1",
         "exec": f"x{job}-{attempt}", "cursor": 0},
        {"t": end, "pid": 1, "ev": "end", "job": job, "exec": f"x{job}-{attempt}"},
    ]


def run_of(rows: list[JobRow], groups: list[tuple[Enqueue, list[int]]],
           spans: Sequence[tuple[int, float, float]] = (), **extra: Any) -> Run:
    ledger = Ledger()
    for job, start, end in spans:
        ran(ledger, job, start, end)
    ledger.lines.sort(key=lambda ln: ln["t"])
    results = [(g, [kiln.EnqueueResult(i) for i in ids]) for g, ids in groups]
    return Run(ledger, {"a": 0.0, "ab": 10.0, "b": 20.0}, results,
               rows={r.id: r for r in rows}, **extra)


def case(**expect: Any) -> Case:
    return Case("t", V, V, (), **expect)


def group(n: int = 2, **options: Any) -> Enqueue:
    return Enqueue("a", "a", "k", tuple({} for _ in range(n)), **options)


def test_a_clean_run_has_no_violation() -> None:
    rows = [row(1), row(2), row(3)]
    run = run_of(rows, [(group(3), [1, 2, 3])], [(1, 1.0, 2.0), (2, 1.5, 2.5), (3, 2.0, 3.0)])
    assert violations(case(caps=(Cap(2, kind="k"),)), run) == []
    assert violations(case(caps=(Cap(1, kind="k"),)), run) == [
        "cap of k in phases ('a', 'ab', 'b'): 2 at once, cap 1"]


def test_a_job_left_unfinished_is_a_violation() -> None:
    run = run_of([row(1), row(2, JobState.AVAILABLE, attempt=0)], [(group(), [1, 2])],
                 [(1, 1.0, 2.0)])
    assert violations(case(), run) == ["job 2: still available (attempt 0)"]


def test_a_cap_exceeded_and_a_cap_with_nothing_to_hold_are_violations() -> None:
    rows = [row(i, args={"tenant": 1}) for i in (1, 2, 3)]
    run = run_of(rows, [(group(3), [1, 2, 3])], [(1, 1.0, 2.0), (2, 1.9, 3.0), (3, 3.0, 4.0)])
    found = violations(case(caps=(Cap(1, kind="k", by="tenant"),)), run)
    assert found == ["cap of k in phases ('a', 'ab', 'b'): 2 at once for tenant=1, cap 1"]
    later = violations(case(caps=(Cap(1, kind="k", by="tenant", phases=("b",)),)), run)
    assert "nothing to hold" in later[0]


def test_one_ending_as_the_next_starts_is_not_two_at_once() -> None:
    assert most_at_once([(1, 1.0, 2.0), (2, 2.0, 3.0)]) == 1
    assert most_at_once([(1, 1.0, float("inf")), (2, 5.0, 6.0)]) == 2


def test_a_limit_that_still_holds_is_a_violation_where_it_should_be_lifted() -> None:
    run = run_of([row(1), row(2)], [(group(), [1, 2])], [(1, 21.0, 22.0), (2, 22.0, 23.0)])
    found = violations(case(at_once=(AtOnce(2, kind="k"),)), run)
    assert found == ["k in phases ('b',): at most 1 at once, expected at least 2 (the limit "
                     "was lifted)"]


def test_a_rate_exceeded_is_a_violation() -> None:
    limit = kiln.RateLimit(rate=1, per=1.0)
    rows = [row(i, admitted=20.0 + 0.3 * i) for i in (1, 2, 3)]
    found = violations(case(rates=(Rate("k", limit, since="b"),)), run_of(rows, []))
    assert found and all(v.startswith("rate of k from phase b:") for v in found)
    paced = [row(i, admitted=20.0 + 1.1 * i) for i in (1, 2, 3)]
    assert violations(case(rates=(Rate("k", limit, since="b"),)), run_of(paced, [])) == []


def test_an_expected_failure_must_use_every_attempt_and_is_not_lost() -> None:
    done = row(1, JobState.FAILED, attempt=2, max_attempts=2)
    early = row(2, JobState.FAILED, attempt=1, max_attempts=2)
    run = run_of([done, early], [(group(expect=FAILED), [1, 2])])
    assert violations(case(), run) == [
        "job 2: failed at attempt 1/2, expected failed having used every attempt"]


def test_a_failure_for_good_must_leave_attempts_and_come_from_a_version_that_knows_fail(
) -> None:
    def failed(job: int, attempt: int, error: str) -> JobRow:
        at = datetime.fromtimestamp(0, UTC)
        record = AttemptError(attempt, 0.0, error, server_id="s1")
        return dataclasses.replace(row(job, JobState.FAILED, attempt=attempt, max_attempts=5),
                                   errors=[record], finished_at=at)

    fail = f"Fail: {FAIL_REASON} (attempt 1, version a)"
    rows = [failed(1, 1, fail), failed(2, 5, fail), failed(3, 2, "RuntimeError: no")]
    run = run_of(rows, [(group(3, expect=FAILED_FOR_GOOD), [1, 2, 3])],
                 [(1, 1.0, 2.0), (2, 1.0, 2.0), (3, 1.0, 2.0)])
    run.ledger.versions[1] = "a"
    assert violations(case(), run) == [
        f"job 2: failed at attempt 5/5, last error {fail!r}: expected failed for good by "
        "kiln.Fail with attempts left",
        "job 3: failed at attempt 2/5, last error 'RuntimeError: no': expected failed for "
        "good by kiln.Fail with attempts left",
    ]
    older = Case("t", dataclasses.replace(V, knows_fail=False), dataclasses.replace(V, name="b"),
                 ())
    alone = run_of(rows[:1], [(group(1, expect=FAILED_FOR_GOOD), [1])], [(1, 1.0, 2.0)])
    alone.ledger.versions[1] = "a"
    assert violations(older, alone) == [
        "job 1: failed for good after its last attempt ran on version a, which does not "
        "know kiln.Fail"]


def test_jobs_nobody_can_claim_must_be_reported() -> None:
    rows = [row(1), row(2, JobState.AVAILABLE, kind="gone", attempt=0)]
    groups = [(group(expect=COMPLETED_OR_REPORTED), [1, 2])]
    silent = violations(case(), run_of(rows, groups, [(1, 1.0, 2.0)],
                                       health=[kiln.Health(ok=True)]))
    assert len(silent) == 1 and "kiln does not say so" in silent[0]
    counted = run_of(rows, groups, [(1, 1.0, 2.0)], reported=1)
    assert violations(case(), counted) == []
    unhealthy = run_of(rows, groups, [(1, 1.0, 2.0)],
                       health=[kiln.Health(ok=False, reasons=("kind gone: no server",))])
    assert violations(case(), unhealthy) == []


def test_rows_unlike_the_declaration_and_wrong_ids_are_violations() -> None:
    rows = [row(1, queue="default", max_attempts=25)]
    found = violations(case(), run_of(rows, [(group(1, queue="mail", max_attempts=2,
                                                    distinct=2, inserted=0), [1])],
                                      [(1, 1.0, 2.0)]))
    assert found == [
        "job 1 (k): in queue 'default', expected 'mail'",
        "job 1 (k): max_attempts 25, expected 2",
        "k enqueued by a in phase a: 1 distinct ids, expected 2",
        "k enqueued by a in phase a: 1 calls inserted a job, expected 0",
    ]
