"""SyncRunner: runs plain ``def`` handlers in the bounded thread pool.

A thread cannot be interrupted, so a sync attempt follows these rules (docs/operating.md,
"Plain def handlers"):

- its timeout starts when a thread starts the handler, not while it waits for one;
- when kiln cancels the attempt (timeout, shutdown, fencing) it sets ``job.cancelled``
  and waits for the thread up to kill_grace; the attempt ends as the cancellation (timed
  out, handed back, or nothing written) however the handler ends. A thread cannot be
  told to stop but by that flag, so returning is how a handler stops early: kiln cannot
  tell that from finishing, and never takes it for a completion;
- a thread still running after kill_grace is *stuck*: kiln gives up on the attempt (its
  record says the handler may still be running) but remembers the thread until it
  ends, so that its pool keeps the slot taken and health can report it.

Owns the thread side of an attempt; the executor turns what happened into a result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from typing import Any

from kiln._model._kinds import Kind
from kiln._server._deadlines import Deadlines
from kiln._server._handle import Job
from kiln._server._threads import ThreadPool

Thread = concurrent.futures.Future[Any]


class _Attempt:
    """One sync attempt, as its thread and the event loop both see it."""

    __slots__ = ("over", "started")

    def __init__(self) -> None:
        self.started = False  # the handler began in its thread (seen on the loop)
        self.over = False  # the attempt ended: a late start must not arm a deadline


class SyncRunner:
    def __init__(self, threads: ThreadPool, deadlines: Deadlines, kill_grace: float) -> None:
        self._threads = threads
        self._deadlines = deadlines
        self._kill_grace = kill_grace
        # When the server cancels every job (shutdown, fencing) it sets the end of the
        # grace it waits, so that a thread is waited for exactly as long as the server waits.
        self.grace_until: float | None = None
        self._given_up: dict[tuple[int, int], Thread] = {}  # (job id, attempt) -> thread
        self._stuck: set[Thread] = set()

    @property
    def stuck(self) -> int:
        """Threads still running a handler whose attempt kiln gave up on."""
        return len(self._stuck)

    @property
    def size(self) -> int:
        return self._threads.size

    def gave_up(self, job_id: int, attempt: int) -> bool:
        return (job_id, attempt) in self._given_up

    def take(self, job_id: int, attempt: int) -> Thread | None:
        """The stuck thread of this attempt, if kiln gave up on it (once)."""
        return self._given_up.pop((job_id, attempt), None)

    async def call(
        self, kind: Kind, job: Job, task: asyncio.Task[Any], timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> Any:
        ctx = contextvars.copy_context()
        attempt = _Attempt()
        deadlines = self._deadlines

        def begin() -> None:
            attempt.started = True
            if not attempt.over:
                deadlines.add(task, timeout)

        def body() -> Any:
            loop.call_soon_threadsafe(begin)
            return ctx.run(kind.handler, job)

        thread = self._threads.submit(body)
        try:
            return await asyncio.wrap_future(thread)
        except asyncio.CancelledError:
            job.cancelled.set()
            if not thread.cancelled():  # it started: wait for it, up to kill_grace
                await self._grace(job, thread, loop)
            raise
        finally:
            attempt.over = True

    async def _grace(self, job: Job, thread: Thread, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for a cancelled attempt's thread up to kill_grace; give up on it then."""
        until = self.grace_until
        if until is None:
            until = loop.time() + self._kill_grace
        try:
            if not thread.done():
                await asyncio.wait([_ended_on(thread, loop)], timeout=until - loop.time())
        finally:  # also when cancelled again while waiting (a timeout, then shutdown)
            if not thread.done():
                self._give_up(job, thread, loop)

    def _give_up(self, job: Job, thread: Thread, loop: asyncio.AbstractEventLoop) -> None:
        self._given_up[(job.id, job.attempt)] = thread
        self._stuck.add(thread)

        def ended(done: Thread) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody counts now
                loop.call_soon_threadsafe(self._ended, job.id, job.attempt, done)

        thread.add_done_callback(ended)

    def _ended(self, job_id: int, attempt: int, thread: Thread) -> None:
        self._stuck.discard(thread)
        if self._given_up.get((job_id, attempt)) is thread:
            del self._given_up[(job_id, attempt)]


def _ended_on(thread: Thread, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A loop future set when ``thread`` ends; unlike asyncio.wrap_future's, safe to
    leave behind when the loop closes before the thread ends."""
    ended: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not ended.done():
            ended.set_result(None)

    def done(_thread: Thread) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle)

    thread.add_done_callback(done)
    return ended
