"""The chaos accounting catches each kind of failure it is there to catch.

Hand-written ledgers and rows, no database: one clean history, then one history per
violation, so a chaos run that reports nothing has checked something.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kiln import JobRow, JobState, RateLimit
from tests.chaos.ledger import account

LIMIT = RateLimit(rate=2, per=1.0, burst=1)
DEAD_AFTER = 6.5


def row(job: int, state: JobState = JobState.COMPLETED, server: str | None = "s1",
        attempt: int = 1, cursor: int = 2, kind: str = "chaos.steps",
        admitted: float | None = None) -> JobRow:
    at = datetime.fromtimestamp(0, UTC)
    return JobRow(
        id=job, queue="chaos", kind=kind, state=state, args={}, params={"cursor": cursor},
        metadata={}, priority=0, run_at=at, attempt=attempt, max_attempts=50, timeout=None,
        backoff=None, errors=[], created_at=at,
        admitted_at=None if admitted is None else datetime.fromtimestamp(admitted, UTC),
        attempted_at=at, finished_at=datetime.fromtimestamp(100, UTC), server_id=server,
        rate_key=None, rescues=0,
    )


def execution(job: int, ex: str, t: float, pid: int = 10, server: str = "s1",
              attempt: int = 1, cursor: int = 0, steps: int = 2, end: bool = True,
              ) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [
        {"ev": "start", "t": t, "pid": pid, "job": job, "attempt": attempt, "server": server,
         "exec": ex, "cursor": cursor}]
    for i in range(cursor, steps):
        lines.append({"ev": "ckpt", "t": t + 0.1 * (i + 1), "pid": pid, "job": job, "exec": ex,
                      "cursor": i + 1})
    if end:
        lines.append({"ev": "end", "t": t + 0.1 * (steps + 1), "pid": pid, "job": job,
                      "exec": ex})
    return lines


def fault(type_: str, t: float, pid: int | None, until: float | None = None) -> dict[str, Any]:
    return {"ev": "fault", "t": t, "pid": 1, "type": type_, "target": pid, "began": t,
            "until": t if until is None else until}


def check(lines: list[dict[str, Any]], rows: list[JobRow]) -> dict[str, Any]:
    return account(sorted(lines, key=lambda ln: ln["t"]), {r.id: r for r in rows},
                   sorted(r.id for r in rows), DEAD_AFTER, LIMIT, "chaos.limited")


def rerun_after(fault_line: dict[str, Any] | None) -> dict[str, Any]:
    """Job 1 starts on pid 10, then runs again on pid 11 (server s2), which completes it."""
    lines = execution(1, "a", 0.0, end=False, steps=1)
    lines += execution(1, "b", 5.0, pid=11, server="s2", attempt=2, cursor=1)
    if fault_line is not None:
        lines.append(fault_line)
    return check(lines, [row(1, server="s2", attempt=2)])


def test_a_clean_history_has_no_violation() -> None:
    result = check(execution(1, "a", 0.0) + execution(2, "b", 0.0, pid=11, server="s2"),
                   [row(1), row(2, server="s2")])
    assert result["violations"] == []
    assert (result["executions"], result["duplicates"]) == (2, 0)


def test_a_rerun_is_explained_by_a_fault_of_the_process_that_ran_it() -> None:
    result = rerun_after(fault("kill", 1.0, 10))
    assert result["violations"] == []
    assert result["causes"] == {"kill": 1} and result["faults"] == {"kill": 1}
    assert rerun_after(fault("db_outage", 1.0, None))["causes"] == {"db_outage": 1}
    # a server that fenced itself (its heartbeat went unconfirmed) reruns its jobs too
    fenced = {"ev": "fenced", "t": 1.0, "pid": 10}
    result = rerun_after(fenced)
    assert result["causes"] == {"self_fence": 1} and result["violations"] == []
    assert result["faults"] == {} and result["self_fences"] == 1


@pytest.mark.parametrize("other", [
    None,  # no fault at all
    fault("kill", 1.0, 99),  # a fault of another process
    fault("kill", 6.0, 10),  # after the rerun started
])
def test_an_unexplained_rerun_is_a_violation(other: dict[str, Any] | None) -> None:
    result = rerun_after(other)
    assert result["causes"] == {"unexplained": 1}
    assert any("ran again" in v for v in result["violations"])


def test_an_unexplained_rerun_names_how_the_server_saw_the_first_run_end() -> None:
    """The worker logs each attempt's result event with its error: the violation says
    what the first execution's server made of it, which is where a diagnosis starts."""
    result = rerun_after({"ev": "result", "t": 0.5, "pid": 10, "job": 1, "attempt": 1,
                          "outcome": "retried", "error": "OperationalError(1213)"})
    (violation,) = result["violations"]
    assert "a started 0.000, no end line" in violation
    assert "outcome retried: OperationalError(1213)" in violation
    assert "then nothing logged" in violation
    handed = rerun_after({"ev": "reconciled", "t": 0.7, "pid": 10, "job": 1, "attempt": 1,
                          "action": "handed_back"})
    assert "then ['reconciled by pid 10 at 0.700 (handed_back)']" in handed["violations"][0]


@pytest.mark.parametrize("state", [JobState.RUNNING, JobState.AVAILABLE, JobState.SCHEDULED])
def test_an_unfinished_job_is_stuck(state: JobState) -> None:
    result = check(execution(1, "a", 0.0, end=False), [row(1, state=state)])
    assert result["stuck"] == [1]


def test_a_missing_or_failed_job_is_lost() -> None:
    result = account(execution(1, "a", 0.0), {2: row(2, state=JobState.FAILED)}, [1, 2],
                     DEAD_AFTER, LIMIT, "chaos.limited")
    assert result["lost"] == [1, 2]


def test_a_completion_no_recorded_attempt_accounts_for_is_a_violation() -> None:
    # the row says attempt 2 of s2 completed it; the only attempt recorded never ended
    result = check(execution(1, "a", 0.0, end=False, steps=0), [row(1, server="s2", attempt=2)])
    assert result["unaccounted"] == [1]
    result = check(execution(1, "a", 0.0, end=False), [row(1)])
    assert result["unaccounted"] == [1]


def test_a_completion_written_before_its_handler_returned_is_a_violation() -> None:
    early = row(1)
    early.finished_at = datetime.fromtimestamp(0.1, UTC)  # the handler returned at 0.3
    result = check(execution(1, "a", 0.0), [early])
    assert result["unaccounted"] == [1]
    assert any("before the handler of exec a returned" in v for v in result["violations"])


def test_two_ends_without_a_fault_between_are_a_double_completion() -> None:
    lines = execution(1, "a", 0.0) + execution(1, "b", 1.0, pid=11, server="s2", attempt=2,
                                               cursor=2)
    result = check(lines, [row(1, server="s2", attempt=2)])
    assert result["double_completed"] == [1] and result["ended_twice"] == 1
    # killed after its end, before its result was written: ran twice, and explained
    result = check([*lines, fault("kill", 0.5, 10)], [row(1, server="s2", attempt=2)])
    assert result["double_completed"] == [] and result["ended_twice"] == 1
    assert result["violations"] == []


def test_a_checkpoint_that_goes_backwards_is_a_violation() -> None:
    lines = execution(1, "a", 0.0, steps=3, end=False)  # acknowledged 1, 2, 3
    lines += execution(1, "b", 5.0, pid=11, server="s2", attempt=2, cursor=1, steps=3)
    lines.append(fault("kill", 1.0, 10))
    result = check(lines, [row(1, server="s2", attempt=2, cursor=3)])
    assert any("resumed from 1 after checkpoint 3" in v for v in result["violations"])
    result = check(execution(1, "a", 0.0, steps=3), [row(1, cursor=2)])
    assert any("below acknowledged 3" in v for v in result["violations"])


def test_a_stopped_process_that_writes_after_it_wakes_is_a_violation() -> None:
    stop = fault("stop", 0.05, 10, until=0.05 + DEAD_AFTER + 1)
    fenced = {"ev": "fenced", "t": stop["until"] + 0.01, "pid": 10}
    # it checkpoints at 0.1 (before the stop), then again 0.1 s after waking
    lines = execution(1, "a", 0.0, steps=1, end=False)
    lines.append({"ev": "ckpt", "t": stop["until"] + 0.1, "pid": 10, "job": 1, "exec": "a",
                  "cursor": 2})
    lines += [stop, fenced, {"ev": "end", "t": stop["until"] + 0.2, "pid": 10, "job": 1,
                             "exec": "a"}]
    result = check(lines, [row(1)])
    assert any("checkpointed [2] after it woke" in v for v in result["violations"])
    # the same checkpoint sent before the stop and acknowledged after it: on the wire
    lines[-4]["sent"] = 0.04
    result = check(lines, [row(1)])
    assert result["violations"] == [] and result["woken_completions"] == 1


def test_a_stopped_process_that_does_not_fence_itself_is_a_violation() -> None:
    stop = fault("stop", 1.0, 10, until=1.0 + DEAD_AFTER + 1)
    result = check([*execution(1, "a", 0.0), stop], [row(1)])
    assert any("did not fence itself" in v for v in result["violations"])
    fenced = {"ev": "fenced", "t": stop["until"] + 0.01, "pid": 10}
    assert check([*execution(1, "a", 0.0), stop, fenced], [row(1)])["violations"] == []
    # fenced already when it was stopped (a stall before): nothing left to notice
    before = {"ev": "fenced", "t": 0.9, "pid": 10}
    assert check([*execution(1, "a", 0.0), stop, before], [row(1)])["violations"] == []
    rejoined = {"ev": "rejoined", "t": 0.95, "pid": 10}
    result = check([*execution(1, "a", 0.0), stop, before, rejoined], [row(1)])
    assert any("did not fence itself" in v for v in result["violations"])


def test_a_zombie_write_accepted_while_the_next_execution_runs_is_a_violation() -> None:
    lines = execution(1, "a", 0.0, steps=1, end=False)
    lines.append({"ev": "ckpt", "t": 5.5, "pid": 10, "job": 1, "exec": "a", "cursor": 1})
    lines += [fault("cut", 1.0, 10, until=4.0), *execution(1, "b", 5.0, pid=11, server="s2",
                                                            attempt=2, cursor=1)]
    result = check(lines, [row(1, server="s2", attempt=2)])
    assert result["overlaps"] == 1
    assert any("accepted after the next execution" in v for v in result["violations"])


@pytest.mark.parametrize(("resumed", "late"), [(1, False), (0, True)])
def test_a_write_sent_before_the_next_claim_and_logged_after_it(resumed: int,
                                                               late: bool) -> None:
    """A process stopped between a commit and its log line logs the write after its job
    ran again: it landed before the claim if the next execution resumed from it."""
    lines = execution(1, "a", 0.0, steps=1, end=False)
    lines[-1].update(t=5.5, sent=0.1)
    lines += [fault("stop", 0.2, 10, until=5.4), *execution(1, "b", 5.0, pid=11, server="s2",
                                                             attempt=2, cursor=resumed)]
    result = check(lines, [row(1, server="s2", attempt=2)])
    assert result["overlaps"] == 1
    found = [v for v in result["violations"] if "accepted after the next execution" in v]
    assert bool(found) is late, result["violations"]


def test_more_admissions_in_a_window_than_rate_plus_burst_is_a_violation() -> None:
    ok = [row(i, kind="chaos.limited", admitted=a) for i, a in
          enumerate([0.0, 0.1, 0.2, 1.05, 1.15, 1.25], 1)]
    lines = [ln for r in ok for ln in execution(r.id, f"e{r.id}", 0.0)]
    result = check(lines, ok)
    assert result["violations"] == [] and result["rate_checked"] == 6
    over = [*ok, row(7, kind="chaos.limited", admitted=1.3)]
    result = check(lines + execution(7, "e7", 0.0), over)
    assert any("4 admissions in the 1.0s window" in v for v in result["violations"])
