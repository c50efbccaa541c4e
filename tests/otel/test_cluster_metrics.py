"""Instruments fed by the leader and the admitter: rescued and rate-limited jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from opentelemetry.trace import SpanKind

import kiln
import kiln.events
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, count, fast_config
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]


async def test_admission_delay_of_rate_limited_jobs(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server({"limited": 4}, fast_config())
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=60)
    running = Running(server)
    await running.started()
    ids = [await client.enqueue("limited", {"i": i}) for i in range(10)]

    async def completed() -> bool:
        return await count(client, "completed", ids) == 10

    await wait_for(completed, 30, "rate-limited jobs completed")

    async def leader() -> bool:  # the leader publishes the database-wide gauges
        return server.is_leader

    await wait_for(leader, 10, "leadership")
    await observer.refresh_counts()
    point = telemetry.histogram(n.ADMISSION_DELAY.name, queue="limited", kiln_job_kind="limited")
    assert point.count == 10
    assert tuple(point.explicit_bounds) == n.WAIT_BUCKETS
    # 4 per second: the last of ten waits for the third window, about two seconds
    assert point.max >= 1.0, point
    assert telemetry.value(n.JOBS_FINISHED.name, kiln_job_kind="limited") == 10
    assert telemetry.value("kiln.jobs.pending", queue="limited") == 0
    assert telemetry.value("kiln.jobs.completed", queue="limited") == 10
    await running.stop()


async def test_a_rescued_job_is_counted_and_its_next_attempt_says_so(
    store_url: str, app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    job_id = await client.enqueue("long", {"seconds": 60}, queue="long")
    doomed = subprocess.Popen(
        [sys.executable, "-m", "tests.otel.worker", store_url, json.dumps({"long": 1})],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
    )
    try:
        assert doomed.stdout is not None and doomed.stdout.readline().startswith("READY")

        async def running_there() -> bool:
            row = await client.get(job_id)
            return row is not None and row.state is kiln.JobState.RUNNING

        await wait_for(running_there, 20, "the job running in the doomed worker")
    finally:
        doomed.kill()
        doomed.wait(10)
        if doomed.stdout is not None:
            doomed.stdout.close()

    rescuer = app.server({"long": 1}, fast_config())
    kilnotel.observe(rescuer, telemetry.meter_provider, telemetry.tracer_provider)
    started: list[kiln.events.JobStarted] = []
    rescuer.events.subscribe(
        lambda e: started.append(e) if isinstance(e, kiln.events.JobStarted) else None)
    running = Running(rescuer)
    await running.started()

    async def rescued_and_rerun() -> bool:
        # its handler started, not only its claim committed: a job claimed ahead and
        # handed back at the stop below never starts, and has no consumer span
        return any(e.job.id == job_id and e.job.attempt == 2 for e in started)

    await wait_for(rescued_and_rerun, 40, "the job rescued and running again")
    t = telemetry
    assert t.value(n.JOBS_RESCUED.name, queue="long", kiln_job_kind="long", outcome="retry") == 1
    await running.stop()
    spans = t.spans()
    (send,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    (second,) = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert second.attributes is not None and second.attributes[n.SPAN_ATTEMPT] == 2
    assert [e.name for e in second.events] == [n.EVENT_RESCUED, n.EVENT_HANDED_BACK]
    assert (second.events[0].attributes or {})[n.SPAN_RESCUES] == 1
    assert send.context is not None
    assert [lk.context.span_id for lk in second.links] == [send.context.span_id]
