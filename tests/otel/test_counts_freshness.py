"""Database-wide gauges are exported only while they are fresh and by one publisher.

Read through the Prometheus exposition, with the labels it really carries
(otel_scope_name/version/schema_url), as a scrape would.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

import kiln
import kilnotel
from kiln._model._job import StateCount
from kilnotel import names as n
from tests.support.otel import Running, fast_config, leads, value
from tests.support.waits import wait_for

AVAILABLE = n.JOBS_BY_STATE["available"].prometheus_name
AGE = n.COUNTS_AGE.prometheus_name
FAILURES = n.COUNTS_REFRESH_FAILURES.prometheus_name


async def test_a_stopped_server_whose_process_lives_on_exports_no_counts(
    app: kiln.App, client: kiln.Client
) -> None:
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    observer = kilnotel.observe(server, provider, traces=False, counts_ttl=60)
    running = Running(server)
    await running.started()
    await wait_for(lambda: leads(server), 10, "leadership")
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

    await wait_for(available_shown, 10, "the counts exported")
    assert value(registry, FAILURES) == 0

    async def broken(states: Sequence[kiln.JobState] | None = None, *,
                     cap: int | None = None) -> list[StateCount]:
        raise ConnectionError("database unreachable (test)")

    server._store.job_counts = broken  # type: ignore[method-assign]

    async def withdrawn() -> bool:
        return value(registry, AVAILABLE, queue="default") is None

    await wait_for(withdrawn, 10, "the stale counts withdrawn")
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

    await wait_for(one_leader, 15, "one leader")
    leader = 0 if servers[0].is_leader else 1

    async def leader_publishes() -> bool:
        return value(registries[leader], AVAILABLE, queue="default") is not None

    await wait_for(leader_publishes, 10, "the leader's counts")
    follower = registries[1 - leader]
    if counts_from == "leader":
        assert value(follower, AVAILABLE, queue="default") is None
        assert value(follower, AGE) is None
    else:
        async def follower_publishes() -> bool:
            return value(follower, AVAILABLE, queue="default") is not None

        await wait_for(follower_publishes, 10, "the follower's counts")
    for run in runs:
        await run.stop()


async def test_a_hung_counts_refresh_is_timed_out_counted_and_recovers(
    app: kiln.App, client: kiln.Client
) -> None:
    """A counts query that never returns was never timed out (L-2): the counts stayed
    withdrawn and the failure counter at 0. Now it is cancelled after counts_timeout."""
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    observer = kilnotel.observe(server, provider, traces=False, counts_ttl=0.2,
                                counts_max_age=0.6, counts_timeout=0.3)
    running = Running(server)
    await running.started()
    job_counts = server._store.job_counts
    hung = asyncio.Event()

    async def hangs(states: Sequence[kiln.JobState] | None = None, *,
                     cap: int | None = None) -> list[StateCount]:
        await hung.wait()  # never set: a query the database never answers
        return []

    server._store.job_counts = hangs  # type: ignore[method-assign]

    async def counted() -> bool:
        return (value(registry, FAILURES) or 0) >= 2

    await wait_for(counted, 10, "two hung refreshes cancelled and counted")
    assert observer.counts is not None and observer.counts.timeouts >= 2
    assert value(registry, AVAILABLE, queue="default") is None
    server._store.job_counts = job_counts  # type: ignore[method-assign]

    async def back() -> bool:
        return value(registry, AVAILABLE, queue="default") is not None

    await wait_for(back, 10, "the counts back once the query answers")
    await running.stop()
    provider.shutdown()


async def test_the_live_states_every_refresh_and_every_state_less_often(
    app: kiln.App, client: kiln.Client
) -> None:
    """Each refresh counts the live states through their indexes; completed and
    cancelled are counted every finished_counts_ttl, and exported meanwhile as last
    counted."""
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    observer = kilnotel.observe(server, provider, traces=False, counts_ttl=60,
                                finished_counts_ttl=3600)
    asked: list[tuple[str, ...] | None] = []
    job_counts = server._store.job_counts

    async def recorded(states: Sequence[kiln.JobState] | None = None, *,
                     cap: int | None = None) -> list[StateCount]:
        asked.append(None if states is None else tuple(sorted(s.value for s in states)))
        return await job_counts(states, cap=cap)

    server._store.job_counts = recorded  # type: ignore[method-assign]
    running = Running(server)
    await running.started()
    await wait_for(lambda: leads(server), 10, "leadership")

    async def first_count() -> bool:
        return observer.counts is not None and observer.counts.refreshes > 0

    await wait_for(first_count, 10, "the first counts")
    job_id = await client.enqueue("ok", {})

    async def completed() -> bool:
        return await client.count(kiln.filter_of(ids=[job_id], state="completed")) == 1

    await wait_for(completed, 10, "the job completed")
    assert observer.counts is not None
    await observer.counts.refresh()  # as the background refresh does it
    await observer.counts.refresh()
    assert asked[0] is None  # the first refresh counts every state
    assert asked[1:] and all(a == ("available", "awaiting", "failed", "pending", "running",
                                   "scheduled") for a in asked[1:]), asked
    # the completed count of the first (full) count stands; it was 0 then
    assert value(registry, n.JOBS_BY_STATE["completed"].prometheus_name,
                 queue="default") == 0
    observer.counts.finished_at = -math.inf  # the finished_counts_ttl passed
    await observer.counts.refresh()
    assert asked[-1] is None
    assert value(registry, n.JOBS_BY_STATE["completed"].prometheus_name,
                 queue="default") == 1
    await running.stop()
    provider.shutdown()
