"""RedisBus against the real Redis on loopback: delivery, sync publishing, and a
dropped connection (cut with a proxy) that comes back."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

import kiln
from kiln._model._wakeup import STATE
from tests.flow.proxy import Proxy
from tests.support.flow import REDIS_HOST, REDIS_PORT, redis_url


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []
        self._event = asyncio.Event()

    def __call__(self, channel: str, payload: str) -> None:
        self.messages.append((channel, payload))
        self._event.set()

    async def wait_for(self, item: tuple[str, str], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while item not in self.messages:
                self._event.clear()
                await self._event.wait()


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    p = Proxy(REDIS_HOST, REDIS_PORT)
    await p.start()
    yield p
    await p.cut()


async def test_publish_reaches_subscribers_of_another_bus() -> None:
    channel = f"kiln-test-{uuid.uuid4().hex[:8]}"
    sender, receiver = kiln.RedisBus(redis_url(), channel), kiln.RedisBus(redis_url(), channel)
    inbox = Inbox()
    await receiver.subscribe(inbox)
    try:
        assert receiver.connected()
        await sender.publish("mail")
        await inbox.wait_for((channel, "mail"))
        await asyncio.to_thread(sender.publish_sync, "scheduled:12.5")
        await inbox.wait_for((channel, "scheduled:12.5"))
        sender.publish_sync("default")  # from the loop's own thread, as a sync client does
        await inbox.wait_for((channel, "default"))
    finally:
        await receiver.unsubscribe(inbox)
        await receiver.close()
        await sender.close()
    assert not receiver.connected()


async def test_other_channels_are_not_delivered() -> None:
    mine, other = (f"kiln-test-{uuid.uuid4().hex[:8]}" for _ in range(2))
    receiver, sender = kiln.RedisBus(redis_url(), mine), kiln.RedisBus(redis_url(), other)
    inbox = Inbox()
    await receiver.subscribe(inbox)
    try:
        await sender.publish("not-for-you")
        await kiln.RedisBus(redis_url(), mine).publish("for-you")
        await inbox.wait_for((mine, "for-you"))
        assert [p for _c, p in inbox.messages] == ["for-you"]
    finally:
        await receiver.close()
        await sender.close()


async def test_reconnects_after_redis_drops_and_reports_it(proxy: Proxy) -> None:
    channel = f"kiln-test-{uuid.uuid4().hex[:8]}"
    bus = kiln.RedisBus(redis_url(proxy.port), channel, max_reconnect_delay=0.2)
    direct = kiln.RedisBus(redis_url(), channel)
    inbox = Inbox()
    await bus.subscribe(inbox)
    try:
        assert bus.connected()
        await proxy.cut()
        await inbox.wait_for((STATE, "down"))
        assert not bus.connected()
        began = time.monotonic()
        bus.publish_sync("lost")  # Redis is away: counted, never raised
        await bus.publish("lost")
        await asyncio.to_thread(bus.publish_sync, "lost")  # a sync caller's thread
        async with asyncio.timeout(2.0):
            while bus.publish_errors < 3:
                await asyncio.sleep(0.01)
        assert time.monotonic() - began < 1.5
        await asyncio.sleep(0.5)  # several reconnect attempts fail meanwhile
        assert not bus.connected()
        await proxy.restore()
        await inbox.wait_for((STATE, "up"))
        assert bus.connected() and bus.reconnects == 1
        await direct.publish("after")
        await inbox.wait_for((channel, "after"))
        assert [m for m in inbox.messages if m[0] == STATE] == [(STATE, "down"), (STATE, "up")]
    finally:
        await bus.close()
        await direct.close()


async def test_subscribe_while_redis_is_down_reports_down_then_up(proxy: Proxy) -> None:
    await proxy.cut()
    bus = kiln.RedisBus(redis_url(proxy.port), f"kiln-test-{uuid.uuid4().hex[:8]}",
                        max_reconnect_delay=0.2)
    inbox = Inbox()
    await bus.subscribe(inbox)  # returns after the first (failed) attempt
    try:
        assert not bus.connected()
        await proxy.restore()
        await inbox.wait_for((STATE, "up"))
        assert bus.connected()
    finally:
        await bus.close()


async def test_a_silent_redis_is_noticed_and_left(proxy: Proxy) -> None:
    """Redis stops answering without closing the connection: the idle PING goes
    unanswered, the bus reports down and reconnects once Redis answers again."""
    channel = f"kiln-test-{uuid.uuid4().hex[:8]}"
    bus = kiln.RedisBus(redis_url(proxy.port), channel, connect_timeout=0.3,
                        health_check_interval=0.2, max_reconnect_delay=0.2)
    direct = kiln.RedisBus(redis_url(), channel)
    inbox = Inbox()
    await bus.subscribe(inbox)
    try:
        assert bus.connected()
        began = time.monotonic()
        proxy.frozen = True
        await inbox.wait_for((STATE, "down"))
        assert time.monotonic() - began < 2.0 and not bus.connected()
        proxy.frozen = False
        await inbox.wait_for((STATE, "up"))
        await direct.publish("again")
        await inbox.wait_for((channel, "again"))
    finally:
        await bus.close()
        await direct.close()
