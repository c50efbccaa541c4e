"""EventHub: subscribers that take only some event types, and ``wants()``, which lets
emitters skip building events that nobody takes."""

from __future__ import annotations

from kiln._events import ClaimQueried, Event, EventHub, Fenced, JobStarted
from kiln._server._health import Counters
from tests.support.parts import row


def test_a_typed_subscriber_gets_only_its_types() -> None:
    hub = EventHub()
    got: list[Event] = []
    unsubscribe = hub.subscribe(got.append, types=[Fenced])
    assert hub.wants(Fenced) and not hub.wants(JobStarted)
    hub.emit(JobStarted(job=row(1)))
    hub.emit(Fenced(server_id="s1", reason="x"))
    assert got == [Fenced(server_id="s1", reason="x")]
    unsubscribe()
    assert not hub.wants(Fenced) and not hub.active


def test_an_untyped_subscriber_wants_everything() -> None:
    hub = EventHub()
    hub.subscribe(Counters())
    assert not hub.wants(JobStarted) and hub.wants(ClaimQueried)
    got: list[Event] = []
    unsubscribe = hub.subscribe(got.append)
    assert hub.wants(JobStarted)
    hub.emit(JobStarted(job=row(1)))
    assert len(got) == 1
    unsubscribe()
    assert not hub.wants(JobStarted)


def test_counters_count_claims_per_query() -> None:
    hub = EventHub()
    counters = Counters()
    hub.subscribe(counters)
    hub.emit(ClaimQueried(queue="q", duration=0.001, claimed=7))
    hub.emit(ClaimQueried(queue="q", duration=0.001, claimed=0))
    assert counters.as_dict()["claimed"] == 7


async def test_a_typed_queued_subscriber_gets_only_its_types() -> None:
    import asyncio

    hub = EventHub()
    got: list[Fenced] = []  # typed: subscribe(fn, types=[Fenced]) takes Fenced only

    async def take(event: Fenced) -> None:
        got.append(event)

    unsubscribe = hub.subscribe(take, queued=True, types=[Fenced])
    assert hub.wants(Fenced) and not hub.wants(JobStarted)
    hub.emit(JobStarted(job=row(1)))
    hub.emit(Fenced(server_id="s1", reason="x"))
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.01)
    assert got == [Fenced(server_id="s1", reason="x")]
    unsubscribe()
    assert not hub.active
    await hub.stop()
