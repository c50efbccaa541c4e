"""RedisBus: wake-ups between processes over Redis pub/sub, for stores without LISTEN.

Owns its Redis connections: one subscription connection per event loop that has
subscribers (read by a task named ``kiln-redis-bus``), an async client for that loop's
publishes, and a sync client for ``publish_sync``. When the subscription connection
drops, or stops answering the PING sent every ``health_check_interval`` while idle, it
reconnects with backoff; meanwhile ``connected()`` is false, so the server falls back to
polling, and subscribers get ``(STATE, "down")`` and later ``(STATE, "up")``.
Publishing is best effort: a wake-up lost while Redis is away costs at most one
poll_interval, never a job, so errors are counted, not raised.

It knows nothing about jobs or stores; ``redis`` is imported only when one is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from kiln._client._bus import BusCallback
from kiln._model._wakeup import STATE

if TYPE_CHECKING:
    import redis
    import redis.asyncio

log = logging.getLogger("kiln.bus")

_DOWN = (OSError, TimeoutError)  # plus redis.RedisError, added at runtime


@dataclasses.dataclass(eq=False)
class _LoopState:
    """The subscription of one event loop."""

    callbacks: list[BusCallback]
    client: redis.asyncio.Redis
    task: asyncio.Task[None] | None = None
    up: bool = False
    first_attempt: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class RedisBus:
    """A Bus over Redis pub/sub: ``kiln.App(url, bus=kiln.RedisBus())``."""

    name = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        channel: str = "kiln",
        *,
        connect_timeout: float = 1.0,
        health_check_interval: float = 2.0,
        max_reconnect_delay: float = 2.0,
    ) -> None:
        import redis  # optional dependency: kiln-jobs[redis]

        self.url = url
        self.channel = channel
        self._connect_timeout = connect_timeout
        self._health = health_check_interval
        self._max_delay = max_reconnect_delay
        self._errors: tuple[type[BaseException], ...] = (*_DOWN, redis.RedisError)
        self._states: dict[asyncio.AbstractEventLoop, _LoopState] = {}
        self._sync: redis.Redis | None = None
        self._sync_down_until = 0.0
        self._tasks: set[asyncio.Task[None]] = set()  # publishes handed to a task
        self.publish_errors = 0
        self.reconnects = 0

    # connections -------------------------------------------------------------------
    def _options(self, *, asyncio_client: bool) -> dict[str, Any]:
        from redis.asyncio.retry import Retry as AsyncRetry
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # no silent retries: a dropped connection must surface, so we can report it;
        # the asyncio client takes its own Retry (redis 8.2 warns about a sync one)
        retry = AsyncRetry(NoBackoff(), 0) if asyncio_client else Retry(NoBackoff(), 0)
        return dict(
            socket_connect_timeout=self._connect_timeout,
            socket_timeout=max(self._connect_timeout, self._health * 2),
            retry=retry,
            client_name=f"kiln-bus-{self.channel}",
        )

    def _sync_client(self) -> redis.Redis:
        if self._sync is None:
            import redis

            options = self._options(asyncio_client=False)
            options["socket_timeout"] = self._connect_timeout  # a caller waits on it
            self._sync = redis.Redis.from_url(self.url, **options)
        return self._sync

    # publishing --------------------------------------------------------------------
    async def publish(self, payload: str) -> None:
        state = self._states.get(asyncio.get_running_loop())
        if state is None:  # no connection of this loop's own: publish from a thread
            await asyncio.to_thread(self._publish_blocking, payload)
            return
        if not state.up:  # our subscription lost Redis: do not queue up attempts
            self.publish_errors += 1
            return
        try:
            await state.client.publish(self.channel, payload)
        except self._errors as exc:
            self._publish_failed(exc)

    def publish_sync(self, payload: str) -> None:
        """Publish from sync code. Called on an event loop's thread (an async client's
        insert), it publishes in a task instead, so it never blocks that loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._publish_blocking(payload)
            return
        task = loop.create_task(self.publish(payload), name="kiln-redis-publish")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _publish_blocking(self, payload: str) -> None:
        # after a failure, skip publishing for a moment rather than block callers again
        if time.monotonic() < self._sync_down_until:
            self.publish_errors += 1
            return
        try:
            self._sync_client().publish(self.channel, payload)
        except self._errors as exc:
            self._sync_down_until = time.monotonic() + 1.0
            self._publish_failed(exc)

    def _publish_failed(self, exc: BaseException) -> None:
        self.publish_errors += 1
        log.debug("redis bus publish failed: %s", exc)

    # subscribing -------------------------------------------------------------------
    async def subscribe(self, callback: BusCallback) -> None:
        """Deliver messages to ``callback`` on this loop; returns after the first
        connection attempt, so ``connected()`` then tells how it went."""
        import redis.asyncio

        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            client = redis.asyncio.Redis.from_url(self.url, **self._options(asyncio_client=True))
            state = _LoopState(callbacks=[], client=client)
            self._states[loop] = state
            state.task = loop.create_task(self._read(state), name="kiln-redis-bus")
        state.callbacks.append(callback)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._connect_timeout + 1.0):
                await state.first_attempt.wait()

    async def unsubscribe(self, callback: BusCallback) -> None:
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            return
        state.callbacks = [c for c in state.callbacks if c is not callback]
        if not state.callbacks:
            del self._states[loop]
            await self._close_state(state)

    def connected(self) -> bool:
        """Whether the subscription of the calling loop (or, outside one, any) is up."""
        try:
            state = self._states.get(asyncio.get_running_loop())
        except RuntimeError:
            state = None
        if state is not None:
            return state.up
        return any(s.up for s in self._states.values())

    async def close(self) -> None:
        """Close this loop's subscription and the sync client (after pending publishes)."""
        loop = asyncio.get_running_loop()
        mine = [t for t in self._tasks if t.get_loop() is loop]
        if mine:
            await asyncio.wait(mine, timeout=self._connect_timeout + 1.0)
        state = self._states.pop(loop, None)
        if state is not None:
            await self._close_state(state)
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def _close_state(self, state: _LoopState) -> None:
        task, state.task = state.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(*self._errors):
            await state.client.aclose()

    # the reader --------------------------------------------------------------------
    async def _read(self, state: _LoopState) -> None:
        delay = 0.05
        while True:
            pubsub = state.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                self._set_up(state, True)
                delay = 0.05
                await self._listen(state, pubsub)
            except self._errors as exc:
                if state.up:
                    log.warning("redis bus lost its connection (%s); reconnecting", exc)
            except Exception:  # a bug must not end the subscription for good
                log.exception("redis bus reader failed; reconnecting")
            finally:
                self._set_up(state, False)
                with contextlib.suppress(*self._errors):
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_delay)

    async def _listen(self, state: _LoopState, pubsub: redis.asyncio.client.PubSub) -> None:
        """Deliver messages; PING when idle, and give up on a silent connection."""
        silent_after = 2 * self._health + self._connect_timeout
        last_seen = time.monotonic()
        while True:
            message = await pubsub.get_message(timeout=self._health)
            if message is not None:  # a message, or the answer to our PING
                last_seen = time.monotonic()
                if message.get("type") == "message":
                    self._deliver(state, self.channel, _text(message["data"]))
                continue
            if time.monotonic() - last_seen > silent_after:
                raise TimeoutError(f"redis bus: no answer for {silent_after:g}s")
            await pubsub.ping()

    def _set_up(self, state: _LoopState, up: bool) -> None:
        changed = state.up != up
        state.up = up
        if up and changed and state.first_attempt.is_set():
            self.reconnects += 1
        if changed and state.first_attempt.is_set():
            self._deliver(state, STATE, "up" if up else "down")
        state.first_attempt.set()

    def _deliver(self, state: _LoopState, channel: str, payload: str) -> None:
        for callback in list(state.callbacks):
            try:
                callback(channel, payload)
            except Exception:
                log.exception("redis bus subscriber %r failed", callback)


def _text(data: Any) -> str:
    return data.decode() if isinstance(data, bytes) else str(data)
