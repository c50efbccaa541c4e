"""Lingering: the handlers of one pool that still run after kiln gave up on their attempt.

Two kinds: async tasks that ignored their cancellation past kill_grace when the server
fenced itself, and threads of plain ``def`` handlers still running past kill_grace
after their timeout, cancellation or fence (a thread cannot be interrupted). Their
attempts are over (a result was sent, or the job was left to the rescuer), but they
still run, so each keeps a slot of its pool taken until it ends: a pool never runs more
live handlers than its concurrency, after a fence or a timeout as at any other time.

Owns only the set and the wake-up when one ends; the pool decides what a slot is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any


class Lingering:
    def __init__(self, on_end: Callable[[], None]) -> None:
        self._on_end = on_end
        self._handlers: set[object] = set()

    def __len__(self) -> int:
        return len(self._handlers)

    def add_task(self, task: asyncio.Task[Any]) -> None:
        if task.done():
            return
        self._handlers.add(task)
        task.add_done_callback(self._ended)

    def add_thread(
        self, thread: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._handlers.add(thread)

        def ended(done: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing to free
                loop.call_soon_threadsafe(self._ended, done)

        thread.add_done_callback(ended)  # runs at once if it already ended

    def _ended(self, handler: object) -> None:
        if handler in self._handlers:
            self._handlers.discard(handler)
            self._on_end()
