"""What the flow tests (tests/flow) share: the rate-limit window check, and the test Redis."""

from __future__ import annotations

import os

from kiln import RateLimit

TICK = 0.01  # seconds; every duration of the rate-limit property tests is a whole number of ticks


def crowded_windows(stamps: list[float], limit: RateLimit) -> list[tuple[float, int]]:
    """Windows (t - per, t] ending at an admission that hold more than rate + burst.

    Every window's count is largest when it ends at an admission, so these are all.
    A microsecond of slack: the stores keep microseconds, the test computes in floats.
    """
    stamps = sorted(stamps)
    bad = []
    for i, t in enumerate(stamps):
        inside = sum(1 for u in stamps[: i + 1] if u > t - limit.per + 1e-6)
        if inside > limit.rate + limit.burst:
            bad.append((t, inside))
    return bad


REDIS_HOST = os.environ.get("KILN_TEST_REDIS_HOST", "127.0.0.1")
REDIS_PORT = int(os.environ.get("KILN_TEST_REDIS_PORT", "6379"))


def redis_url(port: int = REDIS_PORT) -> str:
    return f"redis://{REDIS_HOST}:{port}/0"
