"""Every instrument's values after real jobs run, on every store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import kiln
import kilnotel
from kiln._model._job import StateCount
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, count, fast_config
from tests.support.waits import wait_for

QUEUES = {"default": 4, "long": 1, "idle": 1}
WORK = (("ok", 5), ("sync_ok", 3), ("slow", 2), ("flaky", 1), ("doomed", 2))


async def _enqueue_work(client: kiln.Client) -> list[int]:
    ids: list[int] = []
    for kind, how_many in WORK:
        ids += [await client.enqueue(kind, {"i": i}) for i in range(how_many)]
    return ids


async def _all_finished(client: kiln.Client, ids: list[int]) -> None:
    async def finished() -> bool:
        done = await count(client, "completed", ids) + await count(client, "failed", ids)
        return done == len(ids)

    await wait_for(finished, 30, "every job completed or failed")


async def test_counters_and_histograms_after_real_jobs(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server(QUEUES, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    ids = await _enqueue_work(client)
    await _all_finished(client, ids)
    await running.stop()
    t = telemetry

    for kind, how_many in WORK:
        assert t.value(n.JOBS_ENQUEUED.name, queue="default", kiln_job_kind=kind) == how_many
    claims = {"ok": 5, "sync_ok": 3, "slow": 2, "flaky": 3, "doomed": 4}
    for kind, claimed in claims.items():
        assert t.value(n.JOBS_CLAIMED.name, kiln_job_kind=kind) == claimed, kind
    finished = {
        ("ok", "completed"): 5, ("sync_ok", "completed"): 3, ("slow", "completed"): 2,
        ("flaky", "retry"): 2, ("flaky", "completed"): 1,
        ("doomed", "retry"): 2, ("doomed", "failed"): 2,
    }
    for (kind, outcome), expected in finished.items():
        got = t.value(n.JOBS_FINISHED.name, queue="default", kiln_job_kind=kind, outcome=outcome)
        assert got == expected, (kind, outcome)
    assert t.value(n.JOBS_FINISHED.name) == sum(finished.values())  # nothing else finished
    assert t.value(n.JOBS_RETRIED.name, kiln_job_kind="flaky") == 2
    assert t.value(n.JOBS_RETRIED.name, kiln_job_kind="doomed") == 2
    assert t.value(n.JOBS_RETRIED.name) == 4
    # no store error: every known operation is exported, at 0
    db_errors = {p.attributes[n.OPERATION]: p.value for p in t.points(n.DB_ERRORS.name)}
    assert db_errors == dict.fromkeys(n.DB_OPERATIONS, 0)

    # claim latency: one observation per claim, in the explicit boundaries, all small
    for kind, claimed in claims.items():
        point = t.histogram(n.CLAIM_LATENCY.name, queue="default", kiln_job_kind=kind)
        assert point.count == claimed
        assert tuple(point.explicit_bounds) == n.WAIT_BUCKETS
        under_2_5s = sum(point.bucket_counts[: n.WAIT_BUCKETS.index(2.5) + 1])
        assert under_2_5s == claimed, point
    # job duration by kind and outcome: the 0.3 s jobs land in (0.25, 0.5]
    slow = t.histogram(n.JOB_DURATION.name, kiln_job_kind="slow", outcome="completed")
    assert tuple(slow.explicit_bounds) == n.DURATION_BUCKETS
    assert slow.count == 2 and slow.sum >= 0.6
    assert slow.bucket_counts[n.DURATION_BUCKETS.index(0.5)] == 2, slow.bucket_counts
    ok = t.histogram(n.JOB_DURATION.name, kiln_job_kind="ok", outcome="completed")
    assert ok.count == 5 and sum(ok.bucket_counts[: n.DURATION_BUCKETS.index(0.25) + 1]) == 5
    doomed = t.histogram(n.JOB_DURATION.name, kiln_job_kind="doomed", outcome="failed")
    assert doomed.count == 2
    claim = t.histogram(n.CLAIM_DURATION.name, queue="default")
    assert claim.count >= 1 and tuple(claim.explicit_bounds) == n.QUERY_BUCKETS
    assert claim.max < 5.0


async def test_state_gauges_equal_the_database_and_are_zero_filled(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server(QUEUES, fast_config())
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=60)
    running = Running(server)
    await running.started()
    ids = await _enqueue_work(client)
    await client.enqueue("ok", {}, queue="elsewhere")  # a queue this server does not run
    await client.enqueue("ok", {}, delay=3600)  # scheduled
    await _all_finished(client, ids)
    await wait_for(lambda: _async(server.is_leader), 10, "leadership")  # it publishes
    await observer.refresh_counts()
    points = telemetry.collect()

    queues = {"default", "long", "idle", "elsewhere"}
    for state in n.STATES:
        by_queue = {p.attributes[n.QUEUE]: p.value for p in points[f"kiln.jobs.{state}"]}
        assert set(by_queue) == queues, (state, by_queue)  # zero-filled, every known queue
        for queue in queues:
            in_db = await client.count(kiln.filter_of(state=state, queue=queue))
            assert by_queue[queue] == in_db, (state, queue)
    failed = {p.attributes[n.QUEUE]: p.value for p in points["kiln.jobs.failed"]}
    assert failed["default"] == await count(client, "failed") == 2
    assert {p.attributes[n.QUEUE]: p.value for p in points["kiln.jobs.scheduled"]}["default"] == 1
    oldest = {p.attributes[n.QUEUE]: p.value for p in points[n.QUEUE_OLDEST_AVAILABLE_AGE.name]}
    assert set(oldest) == queues
    assert oldest["idle"] == 0.0 and oldest["elsewhere"] >= 0.0

    # server gauges, read from the running server
    assert telemetry.value(n.SERVER_HEALTHY.name) == 1
    assert telemetry.value(n.SERVER_CONCURRENCY.name, queue="default") == 4
    assert telemetry.value(n.SERVER_CONCURRENCY.name) == 6
    assert telemetry.value(n.SERVER_RUNNING.name) == 0
    assert telemetry.value(n.SERVER_RESULTS_PENDING.name) == 0
    assert 0 <= telemetry.value(n.SERVER_HEARTBEAT_AGE.name) < 2.0
    assert telemetry.value(n.SERVER_LEADER.name) == 1
    assert telemetry.value(n.SERVER_LEADER_CHANGES.name, change="gained") == 1
    assert telemetry.value(n.EVENTS_DROPPED.name) == 0
    await running.stop()
    assert telemetry.value(n.SERVER_HEALTHY.name) == 0  # a stopped server is not healthy


async def _async(value: bool) -> bool:
    return value


async def test_running_gauge_and_hand_back_at_shutdown(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server(QUEUES, fast_config(shutdown_timeout=0.3, kill_grace=0.2))
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    job_id = await client.enqueue("long", {"seconds": 30}, queue="long")
    await wait_for(lambda: _is(client, job_id, kiln.JobState.RUNNING), 10, "long job running")

    async def running_here() -> bool:  # the row says running once the claim commits,
        # a moment before the claim's rows reach the pool (two round trips on MySQL)
        return telemetry.value(n.SERVER_RUNNING.name, queue="long") == 1

    await wait_for(running_here, 5, "the running gauge to count the long job")
    await running.stop()
    row = await client.get(job_id)
    assert row is not None and row.state is kiln.JobState.AVAILABLE, row
    t = telemetry
    assert t.value(n.JOBS_HANDED_BACK.name, queue="long", kiln_job_kind="long") == 1
    assert t.value(n.JOBS_FINISHED.name, kiln_job_kind="long", outcome="handed_back") == 1
    assert t.value(n.JOBS_RETRIED.name) == 0
    (span,) = [s for s in t.spans() if s.name == "process long"]
    assert [e.name for e in span.events] == [n.EVENT_HANDED_BACK]
    assert span.attributes is not None and span.attributes[n.SPAN_OUTCOME] == "handed_back"


async def _is(client: kiln.Client, job_id: int, state: kiln.JobState) -> bool:
    row = await client.get(job_id)
    return row is not None and row.state is state


async def test_counts_refresh_in_the_background_never_per_scrape(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    """Scrapes serve the cache: at most one counts query per ttl, whatever the scrapes."""
    server = app.server(QUEUES, fast_config())
    ttl = 0.5
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=ttl)
    calls: list[float] = []
    job_counts = server._store.job_counts

    async def counted(states: Sequence[kiln.JobState] | None = None, *,
                     cap: int | None = None) -> list[StateCount]:
        calls.append(time.monotonic())
        return await job_counts(states, cap=cap)

    server._store.job_counts = counted  # type: ignore[method-assign]
    running = Running(server)
    await running.started()
    ids = [await client.enqueue("doomed", {}) for _ in range(3)]

    def failed_seen() -> float:
        return telemetry.value("kiln.jobs.failed", queue="default")

    began = time.monotonic()
    scrapes = 0
    while await asyncio.to_thread(failed_seen) != 3:  # scrape from another thread
        scrapes += 1
        assert time.monotonic() - began < 20, "the failed gauge never caught up"
        await asyncio.sleep(0.01)
    for _ in range(100):  # a burst of scrapes
        await asyncio.to_thread(failed_seen)
        scrapes += 1
    elapsed = time.monotonic() - began
    await running.stop()
    assert await count(client, "failed", ids) == 3
    assert scrapes > 100
    assert len(calls) <= elapsed / ttl + 2, (len(calls), elapsed)
    assert observer.counts is not None and observer.counts.errors == 0
