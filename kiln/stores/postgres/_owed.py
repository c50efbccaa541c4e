"""The sync enqueue path's payer of owed wake-ups (the notify limiter's, _limiter).

An async insert that went quiet has its wake-up sent by a timer of its event loop;
sync code (``app.enqueue`` from a web request) has no loop, so the store starts one
daemon thread that sleeps until the earliest owed wake-up is due and sends it
(``send``, on the store's sync connection). It holds the store only weakly through
``send``, and ends with ``stop`` or when the store is gone. Owns the thread only.

A sync producer's quiet inserts come many to a window, and waking the thread for each
cost the producer a thread switch per enqueue (issue 41's web-request path): ``owe``
wakes it only when the wake-up it is owed is due before the time the thread sleeps
until (``_until``; infinite while it waits for nothing or is reading the limiter).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from kiln.stores.postgres._limiter import NotifyLimiter

log = logging.getLogger("kiln.stores.postgres")


class OwedPayer:
    def __init__(self, limiter: NotifyLimiter, send: Callable[[list[str]], bool]) -> None:
        self._limiter = limiter
        self._send = send  # False: the store is gone
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failing = False  # the last send failed (warned once per streak)
        # when the thread wakes by itself (the limiter's clock); infinite while it
        # waits for nothing or reads the limiter, so every owe() then wakes it
        self._until = math.inf

    def owe(self, due: float = -math.inf) -> None:
        """A quiet insert landed (``NotifyLimiter.landed`` has recorded it): make sure
        its wake-up is paid by ``due`` (at once when not given)."""
        if self._thread is None or self._stopped:
            with self._lock:
                if self._stopped:
                    return
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="kiln-notify-owed")
                    self._thread.start()
        # landed() came before this read; the thread sets _until to infinity before it
        # reads the limiter, so either it sees this queue, or it sleeps until a time
        # read here, and only a later one needs waking
        if due < self._until:
            self._wake.set()

    def stop(self) -> None:
        """End the thread and send every wake-up still owed, due or not."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
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
            log.warning("kiln: owed wake-ups go out again")
            self._failing = False
        return sent

    def _run(self) -> None:
        while not self._stopped:
            self._wake.clear()
            self._until = math.inf
            at = self._limiter.deadline()
            if at is None:
                self._wake.wait()
                continue
            delay = at - self._limiter.now()
            if delay > 0:
                self._until = at
                self._wake.wait(delay)
                continue
            queues = self._limiter.due()
            if queues and not self._pay(queues):
                return
