"""The notify limiter: per queue, at most one NOTIFY per ``window`` from this process.

Every notifying commit takes PostgreSQL's global notify lock, so many producers each
committing one job serialise on it (issue 41; Oban measured 698 inserts/s with its
notify trigger against 1,967 without). River's answer, which this follows: a process
sends a queue's notification at most once per short window. An insert inside the
window goes without (``_jobs.INSERT_FAST_QUIET``) and, once it has committed
(``landed``), the queue is owed one. The first insert after the window carries it in
its own transaction (a producer inserting steadily sends no statement of its own for
it); if none comes, the store sends it, outside any producer's transaction, a
``GRACE`` after the window's end (``due``), so a job inserted just after a
notification waits at most 1.5 windows for its wake-up, never a poll. Only landed
inserts are owed: an insert that notifies settles what committed before it started,
never a quiet insert still in flight (whose commit may come after its NOTIFY).

At most one notifying insert per queue is in flight from a process: while one waits
(for the notify lock, which every notifying commit holds through its WAL flush, so
notifying commits cannot share a flush), the inserts after it go quiet even once the
window has passed, and what they are owed is due only after it finished
(``notified``), or once it has been in flight ``STUCK`` windows. Without this, many
producers of one process sent a NOTIFY each as the window ran out behind a queue of
notifying commits, and the limiter limited little (bench_notify ``--diagnose``: 29 % of
inserts notified at 32 producers under load).
Owns only the bookkeeping; PostgresStore decides which inserts may go quiet (plain
jobs available at once, all of one queue).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# the store's default window: a burst of inserts into one queue sends one NOTIFY per
# 10 ms per process (at most 100/s), and a job inserted inside a window waits at most
# 15 ms more for its wake-up; a job inserted more than 10 ms after the queue's last
# NOTIFY from this process (one job every 50 ms, say) notifies as it commits. 2 ms
# left single-job producers at half the rate without NOTIFY (docs/scaling.md)
NOTIFY_WINDOW = 0.01
# an owed wake-up is sent this long (a fraction of the window) after the window ends,
# unless an insert after the window carried it first
GRACE = 0.5
# a notifying insert in flight longer than this many windows (its connection hung, say)
# no longer holds back the wake-ups owed behind it, nor the next notifying insert
STUCK = 10


class NotifyLimiter:
    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._sent: dict[str, float] = {}  # queue -> monotonic time of its last notify
        self._owed: set[str] = set()
        # queue -> when its notifying insert in flight started
        self._inflight: dict[str, float] = {}
        self._lock = threading.Lock()  # sync enqueues come from any thread

    def quiet(self, queue: str) -> bool:
        """Whether an insert into ``queue`` now may skip its NOTIFY (one went out
        within the window, or one is in flight); if not, the insert's NOTIFY counts as
        this window's and settles what is owed (the quiet inserts that landed before it
        started). A quiet insert must call ``landed`` once it has committed, a notifying
        one ``notified`` once it has finished, committed or not."""
        now = self._clock()
        with self._lock:
            started = self._inflight.get(queue)
            if started is not None and now - started < self.window * STUCK:
                return True
            sent = self._sent.get(queue)
            if sent is not None and now - sent < self.window:
                return True
            self._sent[queue] = now
            self._owed.discard(queue)
            self._inflight[queue] = now
            return False

    def notified(self, queue: str, ok: bool = True) -> float | None:
        """The notifying insert into ``queue`` finished (``ok``: committed, with its
        NOTIFY); when ``queue`` is owed a wake-up, when it is due (the limiter's clock).
        One that failed settles nothing: what it would have settled is owed again."""
        with self._lock:
            self._inflight.pop(queue, None)
            if not ok:
                self._owed.add(queue)
            return self._pay_at(queue) if queue in self._owed else None

    def landed(self, queue: str) -> float:
        """A quiet insert into ``queue`` committed: the queue is owed a wake-up. Returns
        when that wake-up is due at the latest (the limiter's clock), which the payer of
        sync inserts compares with the time it sleeps until (_owed)."""
        with self._lock:
            self._owed.add(queue)
            return self._due_at(queue)

    def now(self) -> float:
        return self._clock()

    def _pay_at(self, queue: str) -> float:
        return self._sent[queue] + self.window * (1.0 + GRACE)

    def _due_at(self, queue: str) -> float:
        """When the store sends ``queue``'s owed wake-up: at ``_pay_at``, or while a
        notifying insert is in flight, once it finished or is stuck."""
        started = self._inflight.get(queue)
        if started is None:
            return self._pay_at(queue)
        return max(self._pay_at(queue), started + self.window * STUCK)

    def delay(self) -> float | None:
        """Seconds until the earliest owed wake-up is due; None when none is owed."""
        at = self.deadline()
        return None if at is None else max(0.0, at - self._clock())

    def deadline(self) -> float | None:
        """When the earliest owed wake-up is due (the limiter's clock); None when none
        is owed."""
        with self._lock:
            if not self._owed:
                return None
            return min(self._due_at(q) for q in self._owed)

    def due(self) -> list[str]:
        """The owed queues whose wake-up is due; each counts as notified now."""
        now = self._clock()
        with self._lock:
            ready = [q for q in self._owed if now >= self._due_at(q)]
            for q in ready:
                self._owed.discard(q)
                self._sent[q] = now
            return ready

    def settle(self) -> list[str]:
        """Every owed queue, due or not (the store is closing); each counts as notified."""
        now = self._clock()
        with self._lock:
            owed = list(self._owed)
            self._owed.clear()
            for q in owed:
                self._sent[q] = now
            return owed
