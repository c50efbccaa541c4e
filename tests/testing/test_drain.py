"""drain: due jobs run inline through the real executor, on every store."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import kiln
import kiln.events
from kiln import testing
from kiln._model._job import ServerInfo
from tests.support.typecheck import mypy_user_module


def test_retries_wait_for_their_backoff_unless_with_scheduled(app: kiln.App) -> None:
    seen: list[tuple[int, Any]] = []

    @app.job("flaky", max_attempts=3, backoff=kiln.Constant(600))
    async def flaky(job: kiln.Job) -> None:
        seen.append((job.attempt, job.params.get("step")))
        await job.set_param("step", job.attempt)
        raise RuntimeError(f"attempt {job.attempt} failed")

    app.enqueue("flaky", {})
    first = testing.drain(app)
    assert (len(first), first.retried) == (1, 1)
    assert str(first.errors[0]) == "attempt 1 failed"
    assert testing.drain(app).runs == []  # the retry waits its 600 s
    rest = testing.drain(app, with_scheduled=True)
    assert [r.outcome for r in rest.runs] == [kiln.Outcome.RETRY, kiln.Outcome.FAILED]
    assert seen == [(1, None), (2, 1), (3, 2)]  # each attempt resumes from the checkpoint
    [row] = testing.enqueued_jobs(app, "flaky", state="failed")
    assert row.attempt == 3 and len(row.errors) == 3 and row.params == {"step": 3}


def test_raise_errors_raises_after_the_result_is_written(app: kiln.App) -> None:
    @app.job("boom", max_attempts=1)
    def boom(job: kiln.Job) -> None:
        raise KeyError("missing")

    app.enqueue("boom")
    with pytest.raises(KeyError, match="missing"):
        testing.drain(app, raise_errors=True)
    testing.assert_enqueued(app, "boom", state="failed", count=1)


def test_snoozes_and_delays_run_with_scheduled_and_max_jobs_stops(app: kiln.App) -> None:
    @app.job("sleepy")
    def sleepy(job: kiln.Job) -> kiln.Snooze:
        return kiln.Snooze(3600)

    @app.job("later")
    def later(job: kiln.Job) -> None:
        pass

    app.enqueue("sleepy")
    app.enqueue("later", delay=3600)
    assert testing.drain(app).snoozed == 1
    testing.assert_enqueued(app, "later", state="scheduled")
    drained = testing.drain(app, max_jobs=5, with_scheduled=True)
    assert len(drained) == 5 and drained.snoozed == 4 and drained.completed == 1
    [row] = testing.enqueued_jobs(app, "sleepy", state="scheduled")
    assert row.attempt == 0  # a snooze uses no attempt
    assert len(testing.drain(app, max_jobs=0, with_scheduled=True)) == 0


def test_dependencies_run_in_order_and_wait_on_a_failure(app: kiln.App) -> None:
    order: list[str] = []

    @app.job("step")
    def step(job: kiln.Job) -> None:
        order.append(job.args["name"])
        if job.args["name"] == "bad":
            raise ValueError("bad step")

    last = app.enqueue("step", {"name": "last"}, depends_on=[])
    first = app.enqueue("step", {"name": "first"})
    second = app.enqueue("step", {"name": "second"}, depends_on=[first])
    app.enqueue("step", {"name": "third"}, depends_on=[second])
    bad = app.enqueue("step", {"name": "bad"}, max_attempts=1)
    app.enqueue("step", {"name": "after-bad"}, depends_on=[bad])
    drained = testing.drain(app)
    assert order == ["last", "first", "bad", "second", "third"]
    assert (drained.completed, drained.failed) == (4, 1)
    [waiting] = testing.assert_enqueued(app, "step", state="awaiting", count=1)
    assert waiting.args == {"name": "after-bad"} and int(last) == 1


def test_a_fan_in_reads_its_parts_results_in_a_drain(app: kiln.App) -> None:
    totals: list[dict[int, Any]] = []

    @app.job("part")
    def part(job: kiln.Job) -> int:
        return int(job.args["n"]) * 10

    @app.job("total")
    async def total(job: kiln.Job) -> int:
        results = await job.dependency_results()
        totals.append(results)
        return sum(results.values())

    parts = [app.enqueue("part", {"n": n}) for n in (1, 2)]
    last = app.enqueue("total", {}, depends_on=parts)
    assert len(testing.drain(app)) == 3
    assert totals == [{parts[0]: 10, parts[1]: 20}]
    [row] = testing.enqueued_jobs(app, "total", state="completed")
    assert row.id == last


def test_middleware_wraps_each_attempt_and_events_are_emitted(app: kiln.App) -> None:
    calls: list[str] = []

    async def middleware(job: kiln.Job, call_next: Any) -> Any:
        calls.append(f"before {job.kind}")
        value = await call_next()
        calls.append(f"after {job.kind}")
        return value

    app.use(middleware)

    @app.job("ping")
    async def ping(job: kiln.Job) -> None:
        calls.append("ping")

    hub = kiln.events.EventHub()
    inline: list[str] = []
    queued: list[str] = []
    hub.subscribe(lambda e: inline.append(type(e).__name__))
    hub.subscribe(lambda e: queued.append(type(e).__name__), queued=True)
    app.enqueue("ping")
    testing.drain(app, events=hub)
    assert calls == ["before ping", "ping", "after ping"]
    assert inline == ["JobClaimed", "JobStarted", "JobFinished"]
    assert queued == inline


def test_rate_limits_hold_in_a_drain(app: kiln.App) -> None:
    @app.job("limited", rate_limit=kiln.RateLimit(rate=2, per=3600, burst=2))  # 2 at once
    def limited(job: kiln.Job) -> None:
        pass

    hub = kiln.events.EventHub()
    admitted: list[int] = []
    hub.subscribe(lambda e: admitted.append(len(e.delays)), types=[kiln.events.JobsAdmitted])
    app.enqueue_many([("limited", {"n": n}) for n in range(4)])
    drained = testing.drain(app, events=hub, with_scheduled=True)
    assert drained.completed == 2 and sum(admitted) == 2
    testing.assert_enqueued(app, "limited", state="pending", count=2)


def test_kinds_and_queues_choose_what_runs(app: kiln.App) -> None:
    ran: list[str] = []
    for name, queue in (("a", "qa"), ("b", "qb")):
        app.register(name, lambda job: ran.append(job.kind), queue=queue)
    app.enqueue_many([("a", {}), ("b", {}), ("b", {}, {"queue": "qa"})])
    assert testing.drain(app, kinds="a").completed == 1
    assert testing.drain(app, queues=["qa"]).completed == 1  # the b in qa
    assert ran == ["a", "b"]
    testing.assert_enqueued(app, "b", queue="qb", count=1)
    with pytest.raises(kiln.ValidationError, match=r"kind\(s\) 'c'.*its kinds: a, b"):
        testing.drain(app, kinds=["a", "c"])
    with pytest.raises(kiln.ValidationError, match="max_jobs must be a whole number"):
        testing.drain(app, max_jobs=-1)


def test_jobs_without_a_handler_stay(store_url: str, app: kiln.App) -> None:
    producer = kiln.App(store_url, known_kinds_only=False)
    producer.enqueue("elsewhere", {})
    producer.close()

    @app.job("here")
    def here(job: kiln.Job) -> None:
        pass

    app.enqueue("here")
    assert testing.drain(app).completed == 1
    testing.assert_enqueued(app, "elsewhere", state="available", count=1)


def test_timeouts_hold_and_the_drain_server_is_gone_after(app: kiln.App) -> None:
    @app.job("slow", timeout=0.2, max_attempts=1)
    async def slow(job: kiln.Job) -> None:
        await asyncio.sleep(30)

    @app.job("sync", max_attempts=1)
    def sync(job: kiln.Job) -> None:
        job.set_param_sync("done", True)

    app.enqueue("slow")
    app.enqueue("sync")
    drained = testing.drain(app)
    assert [(r.job.kind, r.outcome) for r in drained.runs] == [
        ("slow", kiln.Outcome.FAILED), ("sync", kiln.Outcome.COMPLETED)]
    assert isinstance(drained.errors[0], TimeoutError)
    [done] = testing.enqueued_jobs(app, "sync", state="completed")
    assert done.params == {"done": True}
    assert done.server_id is not None and done.server_id.startswith("kiln-testing-")

    async def servers() -> list[ServerInfo]:
        store = app.new_store()
        await store.open()
        try:
            return await store.server_list()
        finally:
            await store.close()

    assert asyncio.run(servers()) == []


async def test_adrain_runs_the_jobs_on_the_callers_loop(app: kiln.App) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    @app.job("here")
    async def here(job: kiln.Job) -> None:
        loops.append(asyncio.get_running_loop())
        if job.args.get("again"):
            await app.aenqueue("here", {})

    await app.aenqueue("here", {"again": True})
    drained = await testing.adrain(app)
    assert drained.completed == 2 and loops == [asyncio.get_running_loop()] * 2
    await app.aclose()


def test_runs_carry_what_each_completed_attempt_returned(app: kiln.App) -> None:
    @app.job("sum")
    def total(job: kiln.Job) -> Any:
        if job.args.get("none"):
            return None
        return {"sum": sum(job.args["n"]), "parts": tuple(job.args["n"])}

    @app.job("flaky", max_attempts=2, backoff=kiln.Constant(0))
    def flaky(job: kiln.Job) -> str:
        if job.attempt == 1:
            raise RuntimeError("first attempt")
        return "second"

    app.enqueue("sum", {"n": [1, 2]})
    app.enqueue("sum", {"none": True})
    app.enqueue("flaky", {})
    drained = testing.drain(app, with_scheduled=True)
    by_kind = [(r.job.kind, r.outcome, r.result) for r in drained.runs]
    assert by_kind == [
        ("sum", kiln.Outcome.COMPLETED, {"sum": 3, "parts": [1, 2]}),  # as stored: a list
        ("sum", kiln.Outcome.COMPLETED, None),
        ("flaky", kiln.Outcome.RETRY, None),
        ("flaky", kiln.Outcome.COMPLETED, "second"),
    ]
    assert drained.results == [{"sum": 3, "parts": [1, 2]}, None, "second"]


@pytest.mark.timeout(300)
def test_the_counts_are_ints_under_mypy_strict(tmp_path: Path) -> None:
    _user, stdout = mypy_user_module(tmp_path, textwrap.dedent("""
        from kiln import testing

        drained = testing.Drained()
        reveal_type(drained.completed)
        reveal_type(drained.retried)
        reveal_type(drained.failed)
        reveal_type(drained.snoozed)
        reveal_type(drained.cancelled)
        reveal_type(drained.results)
    """))
    revealed = re.findall(r'Revealed type is "([^"]+)"', stdout)
    assert revealed == ["int"] * 5 + ["list[Any]"], stdout
    assert testing.Drained().completed == 0
