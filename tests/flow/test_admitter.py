"""The Admitter's pass against the real stores: declared kind limits, grouped
JobsAdmitted events with admission delays, local wake-ups, and its sleep."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from kiln import JobFilter, JobState, NewJob, RateLimit, ServerConfig
from kiln._model._job import ServerInfo
from kiln._model._kinds import make_kind
from kiln._server._context import ServerContext
from kiln._server._identity import Identity
from kiln._server.maintenance import server_services
from kiln._server.maintenance.admitter import AHEAD, Admitter
from kiln._server.maintenance.adopter import Adopter
from kiln.events import EventHub, JobsAdmitted, MaintenanceRan
from kiln.stores import Store


@pytest.fixture(autouse=True)
async def _served(store: Store) -> None:
    """A live server serves the queues: the admitter admits only for such queues."""
    await store.server_register(ServerInfo(
        id="s-serving", host="h", pid=1, queues={"q1": 1, "q2": 1, "default": 1},
        kinds=[], version="test", started_at=datetime.now(UTC)))


async def _noop(job: object) -> None:
    return None


def _context(store: Store, limit: RateLimit, woken: list[dict[str, int]]) -> ServerContext:
    kinds = {
        "a": make_kind("a", _noop, queue="q1", rate_limit=limit, rate_key="shared"),
        "b": make_kind("b", _noop, queue="q2", rate_limit=limit, rate_key="shared"),
        "free": make_kind("free", _noop),
    }
    return ServerContext(
        store=store, config=ServerConfig(poll_interval=0.5), events=EventHub(), kinds=kinds,
        identity=Identity.named("s1"), leader_since=lambda: None,
        wake=lambda released, _reason: woken.append(released),
    )


async def test_every_server_runs_an_admitter(store: Store) -> None:
    ctx = _context(store, RateLimit(rate=1), [])
    assert [type(s) for s in server_services(ctx)] == [Admitter, Adopter]


async def test_declares_kind_limits_then_admits_and_reports_delays(store: Store) -> None:
    limit = RateLimit(rate=10, per=60, burst=4)
    woken: list[dict[str, int]] = []
    ctx = _context(store, limit, woken)
    events: list[JobsAdmitted] = []
    ctx.events.subscribe(lambda e: events.append(e) if isinstance(e, JobsAdmitted) else None)
    # inserted by a client that does not know the limit: only the key is on the jobs
    ids = await store.job_insert_many(
        [NewJob(kind="a", args={}, queue="q1", rate_key="shared") for _ in range(3)]
        + [NewJob(kind="b", args={}, queue="q2", rate_key="shared") for _ in range(3)]
    )
    assert (await store.jobs_admit("shared", 100)).admitted == []  # no limit known yet
    admitter = Admitter(ctx)

    counts = await admitter.run_once()

    assert counts == {"admitted": 4, "undeclared": 0}  # the bucket holds `burst` tokens at first
    assert [(k, lim) for k, lim, _n in await store.rate_limit_list()] == [("shared", limit)]
    assert [(e.key, e.queue, e.kind, len(e.delays)) for e in events] == [
        ("shared", "q1", "a", 3), ("shared", "q2", "b", 1)
    ]
    assert all(0.0 <= d < 30.0 for e in events for d in e.delays)
    assert woken == [{"q1": 3, "q2": 1}]
    rows = [await store.job_get(i) for i in ids]
    assert [r.state for r in rows if r] == [JobState.AVAILABLE] * 4 + [JobState.PENDING] * 2
    first = rows[0]
    assert first is not None and first.admitted_at is not None
    assert abs((first.admitted_at - first.created_at).total_seconds() - events[0].delays[0]) < 1e-3
    # more are pending but the bucket is empty: sleep until it refills, at most poll_interval
    assert admitter.next_delay(counts) == 0.5

    events.clear()
    assert await admitter.run_once() == {"admitted": 0, "undeclared": 0}
    assert events == [] and woken == [{"q1": 3, "q2": 1}]


async def test_sleeps_until_the_bucket_refills(store: Store) -> None:
    woken: list[dict[str, int]] = []
    ctx = _context(store, RateLimit(rate=10, per=1, burst=1), woken)
    await store.job_insert_many([NewJob(kind="a", args={}, queue="q1", rate_key="shared")] * 3)
    admitter = Admitter(ctx)
    counts = await admitter.run_once()
    # one token every 100 ms: the bucket's token now, and the next one ahead (within
    # AHEAD, 0.2 s), scheduled at its time
    assert AHEAD == 0.2
    assert counts == {"admitted": 2, "undeclared": 0}
    jobs = sorted(await store.job_list(JobFilter(), limit=10), key=lambda j: j.id)
    assert [j.state for j in jobs] == [JobState.AVAILABLE, JobState.SCHEDULED, JobState.PENDING]
    gap = (jobs[1].run_at - jobs[0].run_at).total_seconds()
    assert 0.1 < gap < 0.1 + 0.01, gap
    # it looks again when the third job's time (0.2 s) is 3/4 of a horizon away
    assert 0.04 < admitter.next_delay(counts) <= 0.05 + 1e-5


async def test_nothing_pending_sleeps_poll_interval(store: Store) -> None:
    admitter = Admitter(_context(store, RateLimit(rate=1), []))
    counts = await admitter.run_once()
    assert counts == {"admitted": 0, "undeclared": 0}
    assert 0.45 <= admitter.next_delay(counts) <= 0.55


async def test_warns_about_pending_jobs_of_a_key_nobody_declares(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = _context(store, RateLimit(rate=10, per=1, burst=5), [])
    # a producer names a key that no kind of any server declares, and gives no limit
    [job_id] = await store.job_insert_many(
        [NewJob(kind="free", args={}, queue="default", rate_key="typo")]
    )
    admitter = Admitter(ctx)
    with caplog.at_level(logging.WARNING, logger="kiln.admitter"):
        assert await admitter.run_once() == {"admitted": 0, "undeclared": 1}
        assert await admitter.run_once() == {"admitted": 0, "undeclared": 1}
    warnings = [r for r in caplog.records if "'typo'" in r.getMessage()]
    assert len(warnings) == 1  # once per key, not every pass
    assert "no rate limit is declared" in warnings[0].getMessage()
    assert admitter.undeclared == {"typo"}
    await store.rate_limit_declare("typo", RateLimit(rate=1))
    assert await admitter.run_once() == {"admitted": 1, "undeclared": 0}
    assert admitter.undeclared == set()
    row = await store.job_get(job_id)
    assert row is not None and row.state is JobState.AVAILABLE


async def test_the_loop_reports_undeclared_keys_in_its_event(store: Store) -> None:
    ctx = _context(store, RateLimit(rate=1), [])
    ran: list[MaintenanceRan] = []
    ctx.events.subscribe(lambda e: ran.append(e) if isinstance(e, MaintenanceRan) else None)
    await store.job_insert_many([NewJob(kind="free", args={}, queue="default", rate_key="typo")])
    admitter = Admitter(ctx)
    await admitter.start()
    try:
        async with asyncio.timeout(5):
            while not ran:
                await asyncio.sleep(0.02)
    finally:
        await admitter.stop()
    assert ran[0] == MaintenanceRan(service="admitter", counts={"admitted": 0, "undeclared": 1})
