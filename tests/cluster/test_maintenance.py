"""The leader's services one pass at a time (``run_once``), on every store.

The config's floor keeps dead_after above 5 s, so the rescuer tests shorten the
rescuer's own copy of it: the pass under test does not depend on its size.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import kiln
import kiln.events
from kiln._events import Event
from kiln._model._job import JobResult, JobRow, JobState, NewJob, Outcome, ServerInfo
from kiln._model._kinds import make_kind
from kiln._model._recurring import Recurring
from kiln._server._context import ServerContext
from kiln._server.maintenance import leader_services, roller
from kiln._server.maintenance.pruner import BEHIND_GRACE, MAX_BATCHES, REST, Pruner, rest_factor
from kiln._server.maintenance.rescuer import Rescuer, rescue_result
from kiln._server.maintenance.scheduler import Scheduler
from kiln._server.maintenance.sweeper import Sweeper
from kiln.stores import Store, store_from_url
from tests.stores.factories import delete_row_only, rollup_counted_everything, server
from tests.support.parts import context

SHORT = 0.2


def events_of(ctx: ServerContext) -> list[Event]:
    seen: list[Event] = []
    ctx.events.subscribe(seen.append)
    return seen


async def claimed(store: Store, server_id: str, **options: Any) -> JobRow:
    await store.server_register(server(server_id))
    await store.job_insert_many([NewJob(kind="k", args={}, queue="q", **options)])
    rows = await store.job_claim("q", ["k"], 1, server_id)
    assert len(rows) == 1
    return rows[0]


def rescuer(ctx: ServerContext) -> Rescuer:
    r = Rescuer(ctx)
    r._dead_after = SHORT  # see the module docstring
    return r


async def test_rescue_puts_a_dead_servers_job_back_and_counts_the_attempt(store: Store) -> None:
    ctx = context(store)
    seen = events_of(ctx)
    row = await claimed(store, "dead", max_attempts=3)
    r = rescuer(ctx)
    assert await r.run_once() == {"rescued": 0, "failed": 0}  # not silent for long enough
    await asyncio.sleep(SHORT + 0.1)
    assert await r.run_once() == {"rescued": 1, "failed": 0}
    after = await store.job_get(row.id)
    assert after is not None and after.state is JobState.AVAILABLE
    assert after.attempt == 1 and after.rescues == 1 and after.server_id is None
    assert "rescued" in after.errors[-1].error and after.errors[-1].server_id == "dead"
    assert [type(e) for e in seen] == [kiln.events.JobRescued]
    assert ctx.woken == [{"q": 1}]  # type: ignore[attr-defined]
    assert await r.run_once() == {"rescued": 0, "failed": 0}  # once


async def test_rescue_leaves_live_servers_alone(store: Store) -> None:
    r = rescuer(context(store))
    row = await claimed(store, "alive")
    await asyncio.sleep(SHORT + 0.1)
    assert await store.server_heartbeat("alive")
    assert await r.run_once() == {"rescued": 0, "failed": 0}
    after = await store.job_get(row.id)
    assert after is not None and after.state is JobState.RUNNING


async def test_second_rescue_in_a_row_waits_for_backoff(store: Store) -> None:
    r = rescuer(context(store))
    row = await claimed(store, "dead-1", max_attempts=5, backoff=kiln.Constant(30).to_json())
    await asyncio.sleep(SHORT + 0.1)
    assert (await r.run_once())["rescued"] == 1
    again = (await store.job_claim("q", ["k"], 1, "dead-2"))[0]
    assert again.id == row.id and again.attempt == 2 and again.rescues == 1
    await store.server_register(server("dead-2"))
    await asyncio.sleep(SHORT + 0.1)
    assert (await r.run_once())["rescued"] == 1
    after = await store.job_get(row.id)
    assert after is not None and after.state is JobState.SCHEDULED and after.rescues == 2
    wait = (after.run_at - await store.now()).total_seconds()
    assert 28 < wait <= 30


async def test_rescue_of_the_last_attempt_fails_the_job(store: Store) -> None:
    r = rescuer(context(store))
    row = await claimed(store, "dead", max_attempts=1)
    await asyncio.sleep(SHORT + 0.1)
    assert await r.run_once() == {"rescued": 0, "failed": 1}
    after = await store.job_get(row.id)
    assert after is not None and after.state is JobState.FAILED
    assert "rescued" in after.errors[-1].error


async def test_a_late_result_after_rescue_changes_nothing(store: Store) -> None:
    r = rescuer(context(store))
    row = await claimed(store, "dead", max_attempts=1)
    await asyncio.sleep(SHORT + 0.1)
    await r.run_once()
    late = JobResult(job_id=row.id, server_id="dead", attempt=1, outcome=Outcome.COMPLETED)
    assert (await store.job_results_apply([late])).applied == 0
    after = await store.job_get(row.id)
    assert after is not None and after.state is JobState.FAILED


def test_rescue_result_decisions() -> None:
    def row(attempt: int, max_attempts: int, rescues: int, backoff: Any = None) -> JobRow:
        at = datetime.now(UTC)
        return JobRow(
            id=1, queue="q", kind="k", state=JobState.RUNNING, args={}, params={}, metadata={},
            priority=0, run_at=at, attempt=attempt, max_attempts=max_attempts, timeout=None,
            backoff=backoff, errors=[], created_at=at, admitted_at=None, attempted_at=at,
            finished_at=None, server_id="dead", rate_key=None, rescues=rescues,
        )

    kind = make_kind("k", lambda job: None, backoff=kiln.Constant(7))
    first = rescue_result(row(1, 3, 0), "dead", kind)
    assert (first.outcome, first.run_at_delay, first.rescued) == (Outcome.RETRY, 0.0, True)
    assert rescue_result(row(2, 3, 1), "dead", kind).run_at_delay == 7  # the kind's backoff
    stored = rescue_result(row(2, 3, 1, kiln.Constant(11).to_json()), "dead", kind)
    assert stored.run_at_delay == 11  # the job's own backoff comes first
    low, high = kiln.Exponential(1.0, 3600.0).bounds(2)
    assert low <= rescue_result(row(2, 3, 1), "dead", None).run_at_delay <= high
    last = rescue_result(row(3, 3, 0), "dead", kind)
    assert last.outcome is Outcome.FAILED and last.error is not None
    assert last.attempt == 3 and last.server_id == "dead"


def test_a_new_leader_waits_dead_after_plus_a_heartbeat() -> None:
    since: list[float | None] = [None]
    ctx = context(None, heartbeat_interval=0.5)  # type: ignore[arg-type]
    ctx.leader_since = lambda: since[0]
    r = Rescuer(ctx)
    assert not r.may_run()  # not the leader
    since[0] = time.monotonic()
    assert not r.may_run()
    assert 60.4 < r.first_delay() <= 60.5
    since[0] = time.monotonic() - 60.5
    assert r.may_run()


async def test_prune_deletes_by_state_retention_in_batches(store: Store, store_url: str) -> None:
    rollup_counted_everything(store_url)  # the retention alone decides here
    ctx = context(store, prune_batch=2, prune_completed_after=0.05,
                  prune_cancelled_after=0.05)
    ids = await store.job_insert_many([NewJob(kind="k", args={}, queue="q") for _ in range(7)])
    rows = await store.job_claim("q", ["k"], 7, "s")
    outcomes = [Outcome.COMPLETED] * 5 + [Outcome.FAILED, Outcome.CANCELLED]
    await store.job_results_apply([
        JobResult(job_id=r.id, server_id="s", attempt=r.attempt, outcome=o)
        for r, o in zip(rows, outcomes, strict=True)
    ])
    await asyncio.sleep(0.15)
    pruner = Pruner(ctx)
    assert await pruner.run_once() == {"completed": 5, "cancelled": 1}
    left = [await store.job_get(i) for i in ids]
    assert [r.state for r in left if r is not None] == [JobState.FAILED]  # kept by default
    assert await pruner.run_once() == {"completed": 0, "cancelled": 0}


async def test_prune_keeps_jobs_younger_than_the_retention(store: Store, store_url: str) -> None:
    rollup_counted_everything(store_url)
    ctx = context(store, prune_completed_after=timedelta(hours=1), prune_failed_after=0.05)
    await store.job_insert_many([NewJob(kind="k", args={}, queue="q") for _ in range(2)])
    rows = await store.job_claim("q", ["k"], 2, "s")
    await store.job_results_apply([
        JobResult(job_id=rows[0].id, server_id="s", attempt=1, outcome=Outcome.COMPLETED),
        JobResult(job_id=rows[1].id, server_id="s", attempt=1, outcome=Outcome.FAILED),
    ])
    await asyncio.sleep(0.15)
    assert await Pruner(ctx).run_once() == {"completed": 0, "cancelled": 0, "failed": 1}


def test_prune_rest_shrinks_only_after_a_long_backlog() -> None:
    assert rest_factor(None) == REST
    assert rest_factor(0.0) == rest_factor(BEHIND_GRACE - 1) == REST
    assert rest_factor(BEHIND_GRACE) == REST / 2
    assert rest_factor(BEHIND_GRACE + 60) == REST / 4
    assert rest_factor(BEHIND_GRACE + 3600) == 0.0  # full speed, however long behind


async def test_prune_backlog_clock_starts_at_a_capped_pass_and_ends_when_caught_up(
        store: Store, store_url: str) -> None:
    rollup_counted_everything(store_url)
    ctx = context(store, prune_batch=1, prune_completed_after=0.05)
    total = MAX_BATCHES + 3  # one pass deletes MAX_BATCHES: the next finds 3 left
    await store.job_insert_many([NewJob(kind="k", args={}, queue="q") for _ in range(total)])
    rows = await store.job_claim("q", ["k"], total, "s")
    await store.job_results_apply([
        JobResult(job_id=r.id, server_id="s", attempt=r.attempt, outcome=Outcome.COMPLETED)
        for r in rows
    ])
    await asyncio.sleep(0.15)
    now = [1000.0]
    pruner = Pruner(ctx, clock=lambda: now[0])
    assert (await pruner.run_once())["completed"] == MAX_BATCHES
    assert pruner.behind_since == 1000.0 and pruner.rest() == REST
    now[0] += BEHIND_GRACE + 61  # still behind after the grace: the rest shrinks
    assert pruner.rest() == REST / 4
    assert (await pruner.run_once())["completed"] == 3  # caught up
    assert pruner.behind_since is None and pruner.rest() == REST


async def test_sweep_removes_long_dead_servers(store: Store) -> None:
    ctx = context(store, sweep_after=0.1)
    await store.server_register(server("old"))
    await asyncio.sleep(0.2)
    await store.server_register(server("new"))
    assert await Sweeper(ctx).run_once() == {"servers": 1, "limits": 0, "stranded": 0}
    assert [s.id for s in await store.server_list()] == ["new"]


async def test_sweep_releases_and_reports_dependents_of_missing_jobs(
    store: Store, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = context(store)
    [gone] = await store.job_insert_many([NewJob(kind="k", args={}, queue="q")])
    [child] = await store.job_insert_many(
        [NewJob(kind="k", args={}, queue="q", depends_on=[gone])]
    )
    delete_row_only(store_url, gone)  # pruned by a kiln that did not release
    with caplog.at_level(logging.WARNING, logger="kiln.sweeper"):
        assert await Sweeper(ctx).run_once() == {"servers": 0, "limits": 0, "stranded": 1}
    row = await store.job_get(child)
    assert row is not None and row.state is JobState.AVAILABLE
    assert ctx.reasons == ["stranded"]  # type: ignore[attr-defined]
    assert ctx.woken == [{"q": 1}]  # type: ignore[attr-defined]
    assert "released 1 awaiting job(s)" in caplog.text
    assert await Sweeper(ctx).run_once() == {"servers": 0, "limits": 0, "stranded": 0}


def every_second() -> Recurring:
    return Recurring(name="tick", kind="k", args={"x": 1}, every=1.0)


def counts(enqueued: int = 0, already: int = 0, unknown_kind: int = 0) -> dict[str, int]:
    return {"enqueued": enqueued, "already": already, "unknown_kind": unknown_kind}


async def test_scheduler_refuses_a_kind_nobody_declares(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo in a schedule's kind enqueues no orphan on every slot, as enqueue refuses
    an unknown kind: the log says so once; once a service declares the kind, its
    latest slot is enqueued."""
    typo = Recurring(name="typo", kind="k.typo", args={}, every=1.0)
    scheduler = Scheduler(context(store, [typo]))
    assert await scheduler.run_once() == counts(unknown_kind=1)
    assert await scheduler.run_once() == counts(unknown_kind=1)
    assert await store.job_list(kiln.JobFilter(kind="k.typo")) == []
    assert caplog.text.count("names kind 'k.typo'") == 1, caplog.text
    await store.server_register(ServerInfo(
        id="other", host="h", pid=1, queues={"q": 1}, kinds=["k.typo"],
        version=kiln.__version__, started_at=datetime.now(UTC)))
    await store.kinds_publish("other", "h", 1, [make_kind("k.typo", print).declaration()])
    assert await Scheduler(context(store, [typo])).run_once() == counts(enqueued=1)
    assert len(await store.job_list(kiln.JobFilter(kind="k.typo"))) == 1


async def test_scheduler_enqueues_a_slot_once_across_leaders(
    store: Store, store_url: str
) -> None:
    other = store_from_url(store_url)  # a second leader, deposed but not aware of it yet
    await other.open()
    try:
        one = Scheduler(context(store, [every_second()]))
        two = Scheduler(context(other, [every_second()]))
        frac = (await store.now()).timestamp() % 1
        if frac > 0.5:  # both passes must fall in the same slot
            await asyncio.sleep(1.05 - frac)
        assert await one.run_once() == counts(enqueued=1)
        assert await two.run_once() == counts()  # read it was done
        assert await one.run_once() == counts()  # remembered
        await asyncio.sleep(1.0)  # the next slot: both remember only the last one
        assert await one.run_once() == counts(enqueued=1)
        assert await two.run_once() == counts(already=1)  # the store said no
    finally:
        await other.close()
    jobs = await store.job_list(kiln.JobFilter(kind="k"))
    assert len(jobs) == 2
    assert all(j.queue == "q" and j.args == {"x": 1} for j in jobs)  # the kind's queue
    assert all(j.metadata["kiln.recurring"] == "tick" for j in jobs)
    slots = sorted(datetime.fromisoformat(j.metadata["kiln.slot"]).timestamp() for j in jobs)
    assert slots[1] - slots[0] == 1.0 and slots[0] == int(slots[0])


async def test_scheduler_enqueues_only_the_latest_missed_slot(store: Store) -> None:
    item = every_second()
    now = await store.now()
    old = item.slot_at_or_before(now - timedelta(seconds=30))
    await store.cron_enqueue(item.name, old, NewJob(kind="k", args={}, queue="q"))
    counts = await Scheduler(context(store, [item])).run_once()
    assert counts["enqueued"] == 1
    jobs = await store.job_list(kiln.JobFilter(kind="k"))
    assert len(jobs) == 2  # the recorded old one and the latest slot, not the 30 between
    last = await store.cron_last_slot(item.name)
    assert last is not None and (await store.now() - last).total_seconds() < 2


async def test_new_schedule_waits_for_its_next_slot_when_the_last_is_old(
    store: Store,
) -> None:
    yearly = Recurring(name="new-year", kind="k", args={}, cron="0 0 1 1 *")
    now = await store.now()
    fresh = (now - yearly.slot_at_or_before(now)).total_seconds() < 60  # 1 January, 00:00
    scheduler = Scheduler(context(store, [yearly]))
    counts = await scheduler.run_once()
    assert counts["enqueued"] == (1 if fresh else 0)
    assert await store.job_count(kiln.JobFilter(kind="k")) == counts["enqueued"]
    assert 0 < scheduler.next_delay(counts) <= 60


async def test_leader_services_include_the_scheduler_only_with_schedules(store: Store) -> None:
    names: Callable[[ServerContext], list[str]] = lambda ctx: [  # noqa: E731
        s.name for s in leader_services(ctx)
    ]
    assert names(context(store)) == ["rescuer", "pruner", "sweeper", "roller"]
    assert names(context(store, [every_second()])) == ["rescuer", "pruner", "sweeper",
                                                       "roller", "scheduler"]


async def test_scheduler_follows_a_kind_declared_by_another_service(store: Store) -> None:
    """A leader that schedules a kind it does not handle gives the slot's job the
    options the kind's servers published, not the defaults (every producer counts)."""
    mail = make_kind("mail.digest", lambda job: None, queue="mail", max_attempts=3)
    await store.server_register(server("mailer"))
    await store.kinds_publish("mailer", "host", 1, [mail.declaration()])
    item = Recurring(name="digest", kind="mail.digest", args={}, every=1.0)
    assert (await Scheduler(context(store, [item])).run_once())["enqueued"] == 1
    [job] = await store.job_list(kiln.JobFilter(kind="mail.digest"))
    assert (job.queue, job.max_attempts) == ("mail", 3)


async def test_the_roller_rolls_a_backlog_in_windows_and_comes_back_at_once(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass rolls window after window until the store says it is caught up (up to
    MAX_STEPS); a pass cut by MAX_STEPS is followed at once, a caught-up one after the
    interval. The windows themselves: tests/stores/test_conformance_rollup.py."""
    answers = [(5, False)] * (roller.MAX_STEPS + 2) + [(3, True)]
    calls: list[int] = []

    async def timings_roll() -> tuple[int, bool]:
        calls.append(1)
        return answers.pop(0)

    monkeypatch.setattr(store, "timings_roll", timings_roll)
    monkeypatch.setattr(roller, "REST", 0.0)
    r = roller.Roller(context(store, prune_interval=60))
    assert r.interval == roller.ROLL_EVERY
    assert await r.run_once() == {"jobs": 5 * roller.MAX_STEPS}
    assert r.next_delay({}) == 0.0  # behind: the next pass at once
    assert await r.run_once() == {"jobs": 5 * 2 + 3}
    assert r.next_delay({}) >= 0.9 * roller.ROLL_EVERY and r.rolled == 5 * roller.MAX_STEPS + 13
    assert len(calls) == roller.MAX_STEPS + 3
