"""The kiln.rate_limit.* metrics against a rate-limited backlog a real store drains:
admitted and started per second near the configured rate, the backlog and the admission
lag above 0 while behind, and 0 once it has drained."""

from __future__ import annotations

import asyncio
import time

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config, leads
from tests.support.waits import wait_for

RATE = 5
JOBS = 30  # six seconds of the rate


async def test_metrics_follow_a_backlog_drained_at_its_rate(
    store_url: str, telemetry: Telemetry
) -> None:
    app = kiln.App(store_url)

    @app.job("mail.send", queue="mail", rate_limit=kiln.RateLimit(rate=RATE, per=1))
    async def send(job: kiln.Job) -> None:
        pass

    app.migrate()
    server = app.server({"mail": 10}, fast_config())
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=60)
    running = Running(server)
    await running.started()
    try:
        for i in range(JOBS):
            await server.client.enqueue("mail.send", {"i": i})
        await wait_for(lambda: leads(server), 10, "leadership")

        def counted(metric: n.Metric) -> float:
            return telemetry.value(metric.name, rate_key="mail.send")

        async def started_some() -> bool:
            return counted(n.RATE_LIMIT_STARTED) >= 3

        await wait_for(started_some, 10, "the first starts")
        await observer.refresh_counts()
        assert counted(n.RATE_LIMIT_RATE) == RATE  # jobs per second: rate / per
        backlog = counted(n.RATE_LIMIT_BACKLOG)
        assert backlog > 0
        assert counted(n.RATE_LIMIT_LAG) == backlog / RATE  # seconds behind its rate
        t0, admitted0, started0 = (time.monotonic(), counted(n.RATE_LIMIT_ADMITTED),
                                   counted(n.RATE_LIMIT_STARTED))
        await asyncio.sleep(3)  # the span the rates are measured over
        t1, admitted1, started1 = (time.monotonic(), counted(n.RATE_LIMIT_ADMITTED),
                                   counted(n.RATE_LIMIT_STARTED))
        span = t1 - t0
        # the limit: at most rate x span, plus a job admitted ahead and one at the edge
        for what, before, after in (("admitted", admitted0, admitted1),
                                    ("started", started0, started1)):
            per_second = (after - before) / span
            assert 0.6 * RATE <= per_second <= RATE + 2 / span, (what, per_second)
        await observer.refresh_counts()
        assert 0 < counted(n.RATE_LIMIT_BACKLOG) < backlog  # still behind, less so
        assert counted(n.RATE_LIMIT_LAG) > 0

        async def drained() -> bool:
            return await server.client.count(kiln.JobFilter(
                states=(kiln.JobState.COMPLETED,))) == JOBS

        await wait_for(drained, 20, "the backlog drained")
        await observer.refresh_counts()
        assert counted(n.RATE_LIMIT_BACKLOG) == 0
        assert counted(n.RATE_LIMIT_LAG) == 0
        assert counted(n.RATE_LIMIT_ADMITTED) == JOBS
        assert counted(n.RATE_LIMIT_STARTED) == JOBS
    finally:
        await running.stop()
        observer.close()
        app.close()
