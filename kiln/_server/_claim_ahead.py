"""ClaimAhead: how many jobs a pool may claim, given its slots and its jobs' pace.

While a pool's jobs are quick, it claims more jobs than it has free slots, so that the
next batch is on its way while the current one runs; a finishing job starts the next
claimed one at once. It claims ahead only as many as its slots get through in
AHEAD_WAIT (20 ms) at the recent average duration, and never more than
(1 + AHEAD_MAX) x concurrency in all, so a job claimed ahead waits about 20 ms at
most. Long jobs switch this off (from concurrency x AHEAD_WAIT on average): then a
pool claims only for its free slots, and idle servers can take the rest. Should long
jobs take every slot while claimed jobs wait, no slot coming free for AHEAD_STALL
(100 ms), the pool hands the waiting jobs back and calls ``forget``: claiming ahead
stops until jobs finish again.

Pure: no store, no clock, no task. The pool (kiln._server._pool) tells it how long
each job took and what it holds; tests drive it with numbers (tests/test_claim_ahead.py).
"""

from __future__ import annotations

AHEAD_WAIT = 0.02  # seconds a job claimed ahead may wait for its slot, on average
AHEAD_MAX = 8  # a pool holds at most (1 + AHEAD_MAX) x concurrency claimed jobs
AHEAD_STALL = 0.1  # seconds without a free slot after which waiting jobs are handed back
_SMOOTHING = 0.1  # weight of the latest duration in the running average


class ClaimAhead:
    __slots__ = ("average",)

    def __init__(self) -> None:
        self.average: float | None = None  # seconds a job of this pool takes, smoothed

    def observe(self, took: float) -> None:
        """A job of this pool took ``took`` seconds."""
        average = self.average
        self.average = took if average is None else average + (took - average) * _SMOOTHING

    def forget(self) -> None:
        """Claim no more ahead until a job finishes again (a stall, a lowered limit)."""
        self.average = None

    def ahead(self, concurrency: int) -> int:
        """How many jobs beyond its slots a pool may hold: as many as its slots get
        through in AHEAD_WAIT at the recent average duration, at most AHEAD_MAX x
        concurrency (none until a job has finished, or when jobs are slow)."""
        average = self.average
        if average is None:
            return 0
        if average <= 0:
            return AHEAD_MAX * concurrency
        return min(AHEAD_MAX * concurrency, int(concurrency * AHEAD_WAIT / average))

    def room(self, concurrency: int, held: int) -> int:
        """How many jobs a pool may claim now, holding ``held`` (running, waiting for a
        slot, or lingering past kill_grace)."""
        return concurrency + self.ahead(concurrency) - held

    def target(self, concurrency: int) -> int:
        """The room a pool that claims ahead waits for before it claims again: half of
        what it may hold, at least its slots, so the next batch arrives while the
        claimed jobs still run."""
        return max(concurrency, (concurrency + self.ahead(concurrency)) // 2)

    @staticmethod
    def stalled(since_freed: float) -> bool:
        """Jobs wait and no slot came free for AHEAD_STALL: longer jobs than the average
        hold every slot, and another server may be idle."""
        return since_freed >= AHEAD_STALL

    @staticmethod
    def patience(poll_interval: float, waiting: bool) -> float:
        """How long the pool may sleep: not past AHEAD_STALL while claimed jobs wait."""
        return min(poll_interval, AHEAD_STALL) if waiting else poll_interval
