"""How many pending jobs of a rate-limited key may be admitted now.

Pure arithmetic shared by every store; the store calls it under the key's lock with
the database clock read after the lock was taken.

Two bounds, both must allow an admission:
- a token bucket (capacity max(burst, 1), refilled at rate per ``per``) spreads
  admissions out instead of letting a backlog go at once;
- a sliding window: the admissions in (now - per, now] stay at most rate + burst.
  Since admissions happen at non-decreasing database times, checking the window that
  ends at each admission bounds every window of length ``per``.

The bucket alone keeps the window's bound while the limit is unchanged: right after
any time s it holds at most C = max(burst, 1) tokens, and over (s, s + per] it refills
``rate``, of which the part before the first admission after s is lost to the cap,
so (s, s + per] admits at most C + rate - 1 <= rate + burst. The stores therefore
count the window (``in_window``, a read of up to rate + burst index entries) only
within ``per`` of a change of the limit (its ``changed_at``), when admissions made
under the old limit may still be in the window; otherwise they pass 0.

Admitting ahead (``ahead`` > 0): one round cannot keep up with a fast key if it admits
only what the bucket holds now (at most max(burst, 1), one round per round trip). So a
round gives each job of a batch the time at which the bucket allows it, as long as that
is less than ``ahead`` from now: the store records that time as the job's
``admitted_at`` and ``run_at`` (``scheduled`` until then) and the bucket's reference
time (``updated_at``) moves to the last one. The admission times are then those of a
bucket admitting one by one (a little later), so the bound above holds for them;
times are whole microseconds, rounded up, spaced as if per were one microsecond
longer, so that no store's rounding brings ``rate`` gaps in a row under per. The
window's count includes admissions ahead (it counts every ``admitted_at`` after
now - per), and a batch stays within its room, so it holds too.
"""

from __future__ import annotations

import dataclasses
import math

from kiln._model._job import RateLimit

MICRO = 1_000_000  # offsets are whole microseconds: every store keeps them exactly


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    admit: int
    tokens: float  # left in the bucket at ``updated`` (after admitting)
    next_at: float  # seconds until the admitter should look at the key again
    # microseconds from now at which each admitted job is admitted (non-decreasing):
    # 0 for now, later for a job admitted ahead (made ``scheduled`` until then)
    offsets: tuple[int, ...] = ()
    updated: int = 0  # microseconds from now: the time ``tokens`` is counted at


def most(limit: RateLimit, ahead: float) -> int:
    """The most jobs one admission of the key can admit: what its bucket holds, what
    it refills over ``ahead``, and one (a store reads no more pending jobs than that)."""
    return max(limit.burst, 1) + math.ceil(limit.rate * max(ahead, 0.0) / limit.per) + 1


def plan(
    limit: RateLimit,
    tokens: float,
    updated_at: float,
    now: float,
    in_window: int,
    pending: int,
    freeing_at: float | None,
    ahead: float = 0.0,
) -> Decision:
    """``freeing_at``: the oldest admission time inside the window, if any.

    ``ahead`` (seconds): admit ahead, giving each job the time the bucket allows it
    when that is less than ``ahead`` from now (see the module's docstring)."""
    capacity = float(max(limit.burst, 1))
    refill = limit.rate / limit.per
    horizon = round(max(ahead, 0.0) * MICRO)
    # the bucket is counted at its reference time, which an admission ahead may have
    # left in the future: nothing refills before it, nothing is admitted before it
    base = max(math.ceil((updated_at - now) * MICRO), 0)
    tokens = min(capacity, tokens + max(now - updated_at, 0.0) * refill)
    window_room = max(limit.rate + limit.burst - in_window, 0)
    most = max(min(pending, window_room), 0)
    offsets: list[int] = []
    if base == 0 or base < horizon:
        offsets = [base] * min(most, math.floor(tokens + 1e-9))
    tokens -= len(offsets)
    updated = base
    # a token ahead: (1 - tokens) of one after the reference, then one every per / rate,
    # counted from the reference and rounded up to the microsecond, with per one
    # microsecond longer: any `rate` gaps in a row then span more than per, in whole
    # microseconds, so no store's rounding brings a window above the bound
    gap = (limit.per * MICRO + 1) / limit.rate
    need = max(1.0 - tokens, 0.0)
    nxt = base + math.ceil(need * gap)
    while len(offsets) < most and nxt < horizon:
        offsets.append(nxt)
        updated = nxt
        need += 1.0
        nxt = base + math.ceil(need * gap)
    if updated != base:
        tokens = 0.0
    wait = nxt / MICRO
    if horizon:
        # look again once the next job's time is within three quarters of the horizon:
        # a round then admits about a quarter of a horizon of jobs, and a round that
        # comes late (a busy machine) still finds jobs admitted for the next 3/4
        wait -= horizon / MICRO * 0.75
    window_wait = 0.0
    if window_room - len(offsets) <= 0:
        # a lower bound: the oldest admission in the window leaves it first
        window_wait = max((now if freeing_at is None else freeing_at) + limit.per - now, 0.0)
    return Decision(admit=len(offsets), tokens=tokens, next_at=max(wait, window_wait, 0.001),
                    offsets=tuple(offsets), updated=updated)
