"""The payer of owed wake-ups (the notify limiter's, _limiter), for async and sync
inserts alike.

A quiet insert's wake-up is never sent in its producer's transaction: once it has
committed, its queue is owed one, and the store's one daemon thread sends it on the
store's sync connection (``send``), at once if nothing was sent within the window,
else when the window ends. The producer (an ``aenqueue`` on the event loop, an
``app.enqueue`` from a web request) only wakes the thread, and only when nothing was
owed before: a steady producer wakes it not at all, the thread paying once a window.
The thread holds the store only weakly through ``send``, and ends with ``stop`` or
when the store is gone. Owns the thread only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kiln.stores.postgres._limiter import NotifyLimiter

log = logging.getLogger("kiln.stores.postgres")


class OwedPayer:
    def __init__(self, limiter: NotifyLimiter, send: Callable[[list[str]], bool]) -> None:
        self._limiter = limiter
        self._send = send  # False: the store is gone
        self._wake = threading.Event()  # something became owed while none was
        self._stopping = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failing = False  # the last send failed (warned once per streak)

    def owe(self) -> None:
        """A quiet insert landed: make sure its wake-up is paid when due."""
        with self._lock:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="kiln-notify-owed")
                self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """End the thread and send every wake-up still owed, due or not."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
        self._stopping.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        queues = self._limiter.settle()
        if queues:
            self._pay(queues)

    def _pay(self, queues: list[str]) -> bool:
        try:
            sent = self._send(queues)
        except Exception:  # servers find the jobs at their next poll: say so, once
            if not self._failing:
                log.warning("kiln: could not send the wake-up owed to %s (servers find"
                            " the jobs at their next poll)", queues, exc_info=True)
            self._failing = True
            return True
        if self._failing:
            log.warning("kiln: wake-ups go out again")
            self._failing = False
        return sent

    def _run(self) -> None:
        """Idle until something is owed; pay what is due; after a payment wait one
        window (the limiter would send nothing sooner), so a steady producer costs
        this thread one wake-up per window, and the producer no signal at all."""
        window = self._limiter.window
        while not self._stopped:
            self._wake.clear()  # before looking: a queue owed after the look sets it
            delay = self._limiter.delay()
            if delay is None:
                self._wake.wait()
                continue
            if delay > 0:
                self._stopping.wait(delay)
                continue
            queues = self._limiter.due()
            if queues and not self._pay(queues):
                return
            self._stopping.wait(window)
