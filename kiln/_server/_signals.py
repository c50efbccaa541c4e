"""Signals: how a server is told to stop, and the event loop a script runs it in.

Owns the ``StopRequest`` that ``Server.stop()`` makes from any thread and ``run()``
waits for; the SIGTERM and SIGINT handlers while a server runs (installed from the
main thread only: elsewhere the signals are the host program's business), of which
the first asks for a graceful shutdown and a second one forces it (the jobs are still
handed back); and ``run_in_new_loop``, the loop of ``run_sync()`` and the CLI, which
does not wait for tasks that ignore cancellation. It stops nothing itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("kiln.server")
T = TypeVar("T")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Whether a server was asked to stop, and whether forced (its waits are skipped).

    ``ask()`` is thread-safe; ``bind()`` ties it to the loop the server runs in, and a
    request made before that is kept (for ``forced``) but not waited for.
    """

    def __init__(self) -> None:
        self.forced = False
        self._asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._asked = asyncio.Event()

    def ask(self, force: bool = False) -> None:
        """From any thread: the loop sets it on its next turn."""
        self.forced = self.forced or force
        loop, asked = self._loop, self._asked
        if asked is not None and loop is not None:
            loop.call_soon_threadsafe(asked.set)

    def ask_here(self, force: bool = False) -> None:
        """From the loop's own thread (a signal): at once, not a turn later."""
        self.forced = self.forced or force
        if self._asked is not None:
            self._asked.set()

    @property
    def asked(self) -> bool:
        return self._asked is not None and self._asked.is_set()

    async def wait(self) -> None:
        assert self._asked is not None, "bind() first"
        await self._asked.wait()


class Signals:
    """Asks ``request`` to stop; ``stopping()`` says whether the server already stops
    for another reason (a failed start, a cancelled ``run()``)."""

    def __init__(self, *, request: StopRequest, stopping: Callable[[], bool]) -> None:
        self._request = request
        self._stopping = stopping

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(sig, self._on_signal, sig)

    def remove(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        force = self._request.asked or self._stopping()
        if force:
            log.warning("second %s: forcing a fast shutdown (jobs are still handed back)",
                        sig.name)
        else:
            log.info("%s received: shutting down gracefully", sig.name)
        self._request.ask_here(force)


def run_in_new_loop(main: Coroutine[Any, Any, T]) -> T:
    """Like ``asyncio.run``, but does not wait for tasks that ignore cancellation.

    ``asyncio.run`` cancels leftover tasks and waits for them: a job that swallows
    CancelledError would hold the process long after the server handed it back.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=0.1))
        for task in leftovers:  # abandoned on purpose: silence "destroyed but pending"
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
