"""Deadlines: cancels job tasks that outlive their timeout, with one timer for all.

``asyncio.timeout`` arms and cancels a timer per job, which costs more than running a
quick job. Here a job only records its deadline; one timer, set for the earliest
deadline that could be due, looks at the recorded jobs when it fires, cancels the
expired ones and sets itself for the next. A deadline later than the armed timer (the
usual case: jobs of a kind share a timeout, and start in order) arms nothing.

Owns the timer and the record of deadlines; the executor turns a cancellation by a
deadline into a timed-out attempt.
"""

from __future__ import annotations

import asyncio
import math

TIMEOUT_MESSAGE = "kiln: job timed out"
_EARLY = 1e-6  # the loop may run a timer up to its clock resolution early


class Deadlines:
    def __init__(self) -> None:
        self._at: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._at)

    def add(self, task: asyncio.Task[object], seconds: float) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        at = loop.time() + seconds
        self._at[task] = at
        if at < self._timer_at:
            self._arm(at)

    def discard(self, task: asyncio.Task[object]) -> bool:
        """Forget ``task``; True when its deadline cancelled it."""
        self._at.pop(task, None)
        if self._expired and task in self._expired:
            self._expired.discard(task)
            return True
        return False

    def _arm(self, at: float) -> None:
        assert self._loop is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        assert self._loop is not None
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time()
        due = [task for task, at in self._at.items() if at <= now + _EARLY]
        for task in due:
            del self._at[task]
            self._expired.add(task)
            task.cancel(msg=TIMEOUT_MESSAGE)
        if self._at:
            self._arm(max(min(self._at.values()), now))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
