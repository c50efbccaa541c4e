"""drain and rate-limited jobs (issue 40 build item 6; the user trial's F6), every store.

``drain(lift_rate_limits=True)`` admits every rate-limited job at once: a backlog runs
to the end. ``drain(with_scheduled=True)`` runs the retries of a rate-limited job
without waiting for its limit again (first admissions stay under the limit:
tests/testing/test_drain.py). A plain ``drain()`` runs what the limit admits now.
"""

from __future__ import annotations

import kiln
from kiln import testing


def test_a_rate_limited_backlog_runs_to_the_end_with_limits_lifted(app: kiln.App) -> None:
    calls: list[int] = []

    @app.job("mail", rate_limit=kiln.RateLimit(5, per=1))
    def mail(job: kiln.Job) -> None:
        calls.append(job.args["i"])

    for i in range(8):
        app.enqueue("mail", {"i": i})
    first = testing.drain(app)  # what the limit admits meanwhile: one at first (burst 0)
    assert 1 <= first.completed < 8
    # the drain says what it left: the jobs their limit has not admitted yet
    assert first.held == 8 - first.completed - len(
        testing.enqueued_jobs(app, "mail", state="available"))
    assert first.held > 0
    assert "held by rate limits (drain(lift_rate_limits=True) runs them)" in repr(first)
    lifted = testing.drain(app, lift_rate_limits=True)
    assert lifted.completed == 8 - first.completed
    assert lifted.held == 0 and "held" not in repr(lifted)
    assert len(calls) == 8, calls
    assert sorted(calls) == list(range(8))
    assert testing.enqueued_jobs(app, "mail", state=["pending", "available"]) == []


def test_retries_of_a_rate_limited_job_run_with_scheduled(app: kiln.App) -> None:
    @app.job("mail", rate_limit=kiln.RateLimit(5, per=1), max_attempts=3,
             backoff=kiln.Constant(60))
    def mail(job: kiln.Job) -> None:
        raise RuntimeError(f"attempt {job.attempt}")

    app.enqueue("mail", {"n": 1})
    first = testing.drain(app)
    assert first.retried == 1
    rest = testing.drain(app, with_scheduled=True)
    assert (rest.retried, rest.failed) == (1, 1), rest  # attempts 2 and 3
    [failed] = testing.enqueued_jobs(app, "mail", state="failed")
    assert failed.attempt == 3


def test_a_drain_of_other_kinds_leaves_their_limits_alone(app: kiln.App) -> None:
    @app.job("mail", rate_limit=kiln.RateLimit(1, per=3600))
    def mail(job: kiln.Job) -> None: ...

    @app.job("other")
    def other(job: kiln.Job) -> None: ...

    for _ in range(3):
        app.enqueue("mail", {})
    assert testing.drain(app, kinds="other", lift_rate_limits=True).runs == []
    assert testing.enqueued_jobs(app, "mail", state="completed") == []
    assert len(testing.enqueued_jobs(app, "mail", state=["pending", "available"])) == 3
