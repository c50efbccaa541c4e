"""The oldest running attempt, build info and kilnotel's own health, as scraped."""

from __future__ import annotations

import platform

import kiln
import kiln.events
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, fast_config, value
from tests.support.waits import wait_for

OLDEST = n.SERVER_OLDEST_RUNNING_AGE.prometheus_name
ERRORS = n.EVENTS_SUBSCRIBER_ERRORS.prometheus_name


async def test_oldest_running_build_info_and_subscriber_errors(
    app: kiln.App, client: kiln.Client
) -> None:
    server = app.server({"default": 1, "long": 1}, fast_config(shutdown_timeout=0.3))
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False)
    assert value(registry, ERRORS) == 0
    assert value(registry, n.BUILD_INFO.prometheus_name, version=kiln.__version__,
                 python_version=platform.python_version()) == 1

    def broken(event: kiln.events.Event) -> None:
        if isinstance(event, kiln.events.JobClaimed):
            raise RuntimeError("a subscriber's bug (test)")

    server.events.subscribe(broken)
    running = Running(server)
    await running.started()
    assert value(registry, OLDEST, queue="long") == 0
    await client.enqueue("long", {"seconds": 30}, queue="long")

    async def running_a_while() -> bool:
        return (value(registry, OLDEST, queue="long") or 0) >= 0.5

    await wait_for(running_a_while, 15, "the long job running half a second")
    assert value(registry, OLDEST, queue="default") == 0
    assert (value(registry, ERRORS) or 0) >= 1
    await running.stop()
    provider.shutdown()
