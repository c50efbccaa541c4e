"""The LISTEN connection: one dedicated connection that wakes servers on NOTIFY.

Owns that connection and its task (``kiln-pg-listener``): connect, LISTEN on the
``kiln`` channel, hand each notification to the callbacks, and reconnect with capped,
jittered backoff when the connection is lost. TCP keepalives detect a silent peer.
Runs no other statement, so an idle listener costs the database nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

import psycopg

from kiln.stores._protocol import NotifyCallback

CHANNEL = "kiln"
log = logging.getLogger("kiln.stores.postgres")


class Listener:
    def __init__(
        self, url: str, *, connect_timeout: float = 5.0, max_backoff: float = 5.0
    ) -> None:
        self._url = url
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._callbacks: list[NotifyCallback] = []
        self._task: asyncio.Task[None] | None = None
        self._up = False
        self._attempted = asyncio.Event()
        self.backend_pid: int | None = None  # for tests that cut the connection
        self.reconnects = 0

    def up(self) -> bool:
        return self._up

    async def start(self, callback: NotifyCallback) -> None:
        """Add ``callback``; start the task once and wait for its first attempt."""
        self._callbacks.append(callback)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kiln-pg-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), self._connect_timeout + 1.0)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._up = False

    async def _run(self) -> None:
        delay = 0.05
        while True:
            self.backend_pid = None
            try:
                await self._listen()
            except psycopg.Error as exc:
                log.warning("kiln listener: connection lost or refused: %s", exc)
            self._up = False
            self._attempted.set()
            if self.backend_pid is not None:  # it was up: start the backoff over
                delay = 0.05
            self.reconnects += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._max_backoff)

    async def _listen(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=max(int(self._connect_timeout), 1),
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            application_name="kiln-listener",
        )
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
            self.backend_pid = conn.info.backend_pid
            self._up = True
            self._attempted.set()
            async for note in conn.notifies():
                self._deliver(note.channel, note.payload)
        finally:
            self._up = False
            with contextlib.suppress(Exception):
                await conn.close()

    def _deliver(self, channel: str, payload: str) -> None:
        for callback in list(self._callbacks):
            try:
                callback(channel, payload)
            except Exception:  # a callback's bug must not stop the listener
                log.exception("kiln listener: callback failed on %s %r", channel, payload)


