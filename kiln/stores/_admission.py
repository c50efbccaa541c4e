"""How many pending jobs of a rate-limited key may be admitted now.

Pure arithmetic shared by every store; the store calls it under the key's lock with
the database clock read after the lock was taken.

Two bounds, both must allow an admission:
- a token bucket (capacity max(burst, 1), refilled at rate per ``per``) spreads
  admissions out instead of letting a backlog go at once;
- a sliding window: the admissions in (now - per, now] stay at most rate + burst.
  Since admissions happen at non-decreasing database times, checking the window that
  ends at each admission bounds every window of length ``per``.
"""

from __future__ import annotations

import dataclasses
import math

from kiln._job import RateLimit


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    admit: int
    tokens: float  # left in the bucket after admitting
    next_at: float  # seconds until one more admission could be allowed


def plan(
    limit: RateLimit,
    tokens: float,
    updated_at: float,
    now: float,
    in_window: int,
    pending: int,
    freeing_at: float | None,
) -> Decision:
    """``freeing_at``: the oldest admission time inside the window, if any."""
    capacity = float(max(limit.burst, 1))
    refill = limit.rate / limit.per
    tokens = min(capacity, tokens + max(now - updated_at, 0.0) * refill)
    window_room = max(limit.rate + limit.burst - in_window, 0)
    admit = max(min(pending, math.floor(tokens + 1e-9), window_room), 0)
    tokens -= admit
    token_wait = max(1.0 - tokens, 0.0) / refill
    window_wait = 0.0
    if window_room - admit <= 0:
        # a lower bound: the oldest admission in the window leaves it first
        window_wait = max((now if freeing_at is None else freeing_at) + limit.per - now, 0.0)
    return Decision(admit=admit, tokens=tokens, next_at=max(token_wait, window_wait, 0.001))
