"""perform: one handler, run directly with a real Job, no database row."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln import testing


@pytest.fixture
def app(tmp_path: Path) -> Iterator[kiln.App]:
    with testing.migrated_url(directory=tmp_path) as url:
        app = kiln.App(url)
        yield app
        app.close()


def test_args_and_checkpoints_go_through_json_and_come_back(app: kiln.App) -> None:
    got: dict[str, Any] = {}

    @app.job("sync", queue="q", priority=3)
    def sync(job: kiln.Job) -> None:
        got.update(args=job.args, attempt=job.attempt, queue=job.queue, params=dict(job.params),
                   priority=job.priority, metadata=job.metadata)
        job.set_param_sync("pair", (1, 2))

    done = testing.perform(app, "sync", {"t": (1, 2)}, params={"seen": 1}, attempt=2,
                           metadata={"m": 1})
    assert got == {"args": {"t": [1, 2]}, "attempt": 2, "queue": "q", "params": {"seen": 1},
                   "priority": 3, "metadata": {"m": 1}}
    assert (done.outcome, done.value, done.error, done.delay) == (
        kiln.Outcome.COMPLETED, None, None, None)
    assert done.params == {"seen": 1, "pair": [1, 2]} == done.job.params
    assert isinstance(done.job, kiln.Job) and done.job.id == 0
    testing.refute_enqueued(app)  # nothing was written


def test_outcomes_snooze_cancel_retry_and_failed(app: kiln.App) -> None:
    @app.job("snooze")
    async def snooze(job: kiln.Job) -> kiln.Snooze:
        return kiln.Snooze(30)

    @app.job("cancel")
    async def cancel(job: kiln.Job) -> kiln.Cancel:
        return kiln.Cancel("no longer wanted")

    @app.job("fail", max_attempts=2, backoff=kiln.Constant(7))
    async def fail(job: kiln.Job) -> None:
        raise LookupError("gone")

    snoozed = testing.perform(app, "snooze")
    assert (snoozed.outcome, snoozed.delay, snoozed.value) == ("snoozed", 30.0, kiln.Snooze(30))
    assert testing.perform(app, "cancel").outcome == "cancelled"
    with pytest.raises(LookupError, match="gone"):
        testing.perform(app, "fail")
    retry = testing.perform(app, "fail", raise_errors=False)
    assert (retry.outcome, retry.delay, type(retry.error)) == ("retry", 7.0, LookupError)
    last = testing.perform(app, "fail", attempt=2, raise_errors=False)
    assert (last.outcome, last.delay) == ("failed", None)


def test_middleware_and_timeouts_apply(app: kiln.App) -> None:
    calls: list[str] = []

    async def middleware(job: kiln.Job, call_next: Any) -> Any:
        calls.append(f"around {job.kind}")
        return await call_next()

    app.use(middleware)

    @app.job("slow", timeout=0.1)
    async def slow(job: kiln.Job) -> None:
        await asyncio.sleep(30)

    with pytest.raises(TimeoutError, match=r"timed out after 0\.1s"):
        testing.perform(app, "slow")
    assert calls == ["around slow"]


def test_bad_input_is_refused_before_the_handler_runs(app: kiln.App) -> None:
    ran: list[int] = []
    app.register("k", lambda job: ran.append(1))
    with pytest.raises(kiln.UnknownKindError, match="'nope'"):
        testing.perform(app, "nope")
    with pytest.raises(kiln.ValidationError, match="args must be JSON-serialisable"):
        testing.perform(app, "k", {"x": object()})
    with pytest.raises(kiln.ValidationError, match="unknown enqueue option"):
        testing.perform(app, "k", colour="red")  # type: ignore[call-arg]
    with pytest.raises(kiln.ValidationError, match="attempt must be a whole number"):
        testing.perform(app, "k", attempt=0)
    with pytest.raises(kiln.ValidationError, match="past max_attempts=1"):
        testing.perform(app, "k", attempt=2, max_attempts=1)
    assert ran == []


def test_a_checkpoint_that_is_not_json_fails_the_attempt(app: kiln.App) -> None:
    @app.job("bad")
    async def bad(job: kiln.Job) -> None:
        await job.set_param("x", {1, 2})

    with pytest.raises(kiln.ValidationError, match="param 'x' must be JSON-serialisable"):
        testing.perform(app, "bad")


async def test_aperform_runs_on_the_callers_loop_and_its_enqueues_are_real(
    app: kiln.App,
) -> None:
    @app.job("parent")
    async def parent(job: kiln.Job) -> None:
        await app.aenqueue("child", {"of": job.args["n"]})

    @app.job("child")
    async def child(job: kiln.Job) -> None:
        pass

    done = await testing.aperform(app, "parent", {"n": 1})
    assert done.outcome == "completed"
    testing.assert_enqueued(app, "child", args={"of": 1}, count=1)
    await app.aclose()


def test_a_fan_in_reads_the_dependency_results_it_is_given(app: kiln.App) -> None:
    """Without dependency_results a fan-in reads {} (it waited on nothing); with them,
    what the store would give: through JSON, in id order."""
    seen: list[Any] = []

    @app.job("sum")
    async def total(job: kiln.Job) -> int:
        parts = await job.dependency_results()
        seen.append(list(parts))
        return sum(p["n"] for p in parts.values() if p is not None)

    @app.job("sum.sync")
    def total_sync(job: kiln.Job) -> int:
        return len(job.dependency_results_sync())

    assert testing.perform(app, "sum").value == 0
    done = testing.perform(app, "sum", dependency_results={9: {"n": 2}, 4: {"n": 1}, 6: None})
    assert done.value == 3 and done.outcome == "completed"
    assert seen == [[], [4, 6, 9]]
    assert testing.perform(app, "sum.sync", dependency_results={1: "x"}).value == 1
    with pytest.raises(kiln.ValidationError, match="dependency id"):
        testing.perform(app, "sum", dependency_results={"1": 1})  # type: ignore[dict-item]
    with pytest.raises(kiln.ValidationError, match=r"not JSON|cannot be stored"):
        testing.perform(app, "sum", dependency_results={1: object()})
