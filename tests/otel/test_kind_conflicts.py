"""The kiln_kind_conflicts gauge: kinds that live servers declare differently."""

from __future__ import annotations

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config


async def test_two_services_declaring_one_kind_differently(
    store_url: str, app: kiln.App, telemetry: Telemetry
) -> None:
    app.migrate()
    server = app.server({"default": 1}, fast_config())
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=60)
    running = Running(server)
    await running.started()
    await observer.refresh_counts()
    assert telemetry.value(n.KIND_CONFLICTS.name) == 0

    other_app = kiln.App(store_url)  # another service: "ok" with other options
    other_app.register("ok", lambda job: None, queue="other", max_attempts=2)
    other = Running(other_app.server({"other": 1}, fast_config()))
    await other.started()
    try:
        await observer.refresh_counts()
        assert telemetry.value(n.KIND_CONFLICTS.name) == 1
    finally:
        await other.stop()
        other_app.close()
    await observer.refresh_counts()  # the other service is gone: no conflict left
    assert telemetry.value(n.KIND_CONFLICTS.name) == 0
    await running.stop()
    # a stopped server withdraws it with the counts, rather than freeze it (L-1)
    assert telemetry.points(n.KIND_CONFLICTS.name) == []
