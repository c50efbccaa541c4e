"""Database-wide gauges are exported only while they are fresh and by one publisher.

Read through the Prometheus exposition, with the labels it really carries
(otel_scope_name/version/schema_url), as a scrape would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import kiln
import kilnotel
from kiln._job import StateCount
from kilnotel import names as n
from tests.otel.conftest import Running, fast_config, wait_until

AVAILABLE = n.JOBS_BY_STATE["available"].prometheus_name
AGE = n.COUNTS_AGE.prometheus_name
FAILURES = n.COUNTS_REFRESH_FAILURES.prometheus_name


def series(registry: CollectorRegistry, family: str) -> Iterator[tuple[dict[str, str], float]]:
    for line in generate_latest(registry).decode().splitlines():
        match = re.match(rf"^{family}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            assert labels["otel_scope_name"] == "kilnotel", line
            yield labels, float(match.group(2))


def value(registry: CollectorRegistry, family: str, **labels: str) -> float | None:
    found = [v for have, v in series(registry, family)
             if all(have.get(k) == w for k, w in labels.items())]
    assert len(found) <= 1, (family, labels, found)
    return found[0] if found else None


async def leads(server: kiln.Server) -> bool:
    return server.is_leader


async def test_a_stopped_server_whose_process_lives_on_exports_no_counts(
    app: kiln.App, client: kiln.Client
) -> None:
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    observer = kilnotel.observe(server, provider, traces=False, counts_ttl=60)
    running = Running(server)
    await running.started()
    await wait_until(lambda: leads(server), 10, "leadership")
    await observer.refresh_counts()
    assert value(registry, AVAILABLE, queue="default") == 0
    assert (value(registry, AGE) or 0) >= 0
    await running.stop()
    for _ in range(3):  # the database gains work the stopped server never sees
        await client.enqueue("ok", {})
    assert value(registry, AVAILABLE, queue="default") is None
    assert value(registry, AGE) is None
    provider.shutdown()


async def test_counts_that_cannot_be_refreshed_vanish_and_their_age_shows(
    app: kiln.App, client: kiln.Client
) -> None:
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False, counts_ttl=0.2, counts_max_age=0.6)
    running = Running(server)
    await running.started()

    async def available_shown() -> bool:
        return value(registry, AVAILABLE, queue="default") is not None

    await wait_until(available_shown, 10, "the counts exported")
    assert value(registry, FAILURES) == 0

    async def broken() -> list[StateCount]:
        raise ConnectionError("database unreachable (test)")

    server._store.job_counts = broken  # type: ignore[method-assign]

    async def withdrawn() -> bool:
        return value(registry, AVAILABLE, queue="default") is None

    await wait_until(withdrawn, 10, "the stale counts withdrawn")
    age = value(registry, AGE)
    assert age is not None and age > 0.6
    assert (value(registry, FAILURES) or 0) >= 1
    await running.stop()
    provider.shutdown()


@pytest.mark.parametrize("counts_from", ["leader", "all"])
async def test_only_the_leader_publishes_database_counts_by_default(
    app: kiln.App, client: kiln.Client, counts_from: str
) -> None:
    servers = [app.server({"default": 1}, fast_config()) for _ in range(2)]
    registries = []
    for server in servers:
        provider, registry = kilnotel.prometheus_provider()
        kilnotel.observe(server, provider, traces=False, counts_ttl=0.2,
                         counts_from=counts_from)  # type: ignore[arg-type]
        registries.append(registry)
    runs = [Running(s) for s in servers]
    for run in runs:
        await run.started()

    async def one_leader() -> bool:
        return sum(s.is_leader for s in servers) == 1

    await wait_until(one_leader, 15, "one leader")
    leader = 0 if servers[0].is_leader else 1

    async def leader_publishes() -> bool:
        return value(registries[leader], AVAILABLE, queue="default") is not None

    await wait_until(leader_publishes, 10, "the leader's counts")
    follower = registries[1 - leader]
    if counts_from == "leader":
        assert value(follower, AVAILABLE, queue="default") is None
        assert value(follower, AGE) is None
    else:
        async def follower_publishes() -> bool:
            return value(follower, AVAILABLE, queue="default") is not None

        await wait_until(follower_publishes, 10, "the follower's counts")
    for run in runs:
        await run.stop()
