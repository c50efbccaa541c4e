"""A bounded pool of daemon threads for plain ``def`` handlers.

Daemon threads, unlike concurrent.futures' workers, never hold the process open at
exit: a sync handler that ignores cancellation cannot keep a stopped worker alive.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class ThreadPool:
    def __init__(self, size: int, name: str = "kiln-sync") -> None:
        self._size = max(size, 1)
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._size

    def grow(self, size: int) -> None:
        """Allow up to ``size`` threads (a queue's concurrency was raised at runtime)."""
        with self._lock:
            self._size = max(self._size, size)

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        with self._lock:
            if self._idle == 0 and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(_STOP)
        self._threads = []
