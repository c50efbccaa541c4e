"""The notify limiter: per queue, at most one NOTIFY per ``window`` from this process,
and none inside a producer's transaction.

Every notifying commit takes PostgreSQL's global notify lock, so many producers each
committing one job serialise on it (issue 41; Oban measured 698 inserts/s with its
notify trigger against 1,967 without). River's answer is a per-queue limit; this goes
one step further, as Oban did: a plain insert never notifies in its own transaction
(``_jobs.INSERT_FAST_QUIET``); once it has committed (``landed``) its queue is owed a
wake-up, which the store's payer (_owed: one thread, on the store's sync connection)
sends outside every producer's transaction: at once if the payer sent none within the
window, else when the window ends. So a job waits at most one window (plus a round
trip) for its wake-up, never a poll, and a producer's commit never takes the notify
lock. A wake-up is owed only once its insert has committed, so the NOTIFY
that pays it always comes after the commit it announces. Owns only the bookkeeping;
PostgresStore decides which inserts go quiet (plain jobs available at once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

# the store's default window: a burst of inserts into one queue sends one NOTIFY per
# 2 ms per process (at most 500/s, from one connection), and a job inserted inside a
# window waits at most 2 ms more for its wake-up; since none of those NOTIFYs is in a
# producer's transaction, a short window no longer costs producers' commits
# (bench/RESULTS.md, "Notifications after the commit")
NOTIFY_WINDOW = 0.002


class NotifyLimiter:
    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._sent: dict[str, float] = {}  # queue -> monotonic time of its last notify
        self._owed: set[str] = set()
        self._lock = threading.Lock()  # inserts come from any thread

    def landed(self, queues: Iterable[str]) -> bool:
        """Quiet inserts into ``queues`` committed: each is owed a wake-up. True when
        nothing was owed before (an idle payer must wake up; a payer with something
        owed is already due to look again within a window)."""
        with self._lock:
            owed = self._owed
            idle = not owed
            owed.update(queues)
            return idle

    def _pay_at(self, queue: str) -> float:
        sent = self._sent.get(queue)
        return float("-inf") if sent is None else sent + self.window

    def delay(self) -> float | None:
        """Seconds until the earliest owed wake-up is due; None when none is owed."""
        now = self._clock()
        with self._lock:
            if not self._owed:
                return None
            return max(0.0, min(self._pay_at(q) for q in self._owed) - now)

    def due(self) -> list[str]:
        """The owed queues whose wake-up is due; each counts as notified now."""
        now = self._clock()
        with self._lock:
            ready = [q for q in self._owed if now >= self._pay_at(q)]
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
