"""Governor: how often it reads the queue controls. Without notifications every
max(poll_interval, UNNOTIFIED_FLOOR), so a short poll_interval does not multiply the
reads (docs/idle-cost.md); with them the safety-net interval, whatever poll_interval."""

from __future__ import annotations

from typing import Any, cast

from kiln._events import EventHub
from kiln._governor import UNNOTIFIED_FLOOR, Governor
from kiln.stores import Store


def _governor(poll: float, safety: float, notified: bool) -> Governor:
    return Governor(cast(Store, cast(Any, None)), EventHub(), dict, {}, lambda: "s1",
                    (poll, safety), lambda: notified)


def test_without_notifications_a_short_poll_interval_reads_once_a_second() -> None:
    assert UNNOTIFIED_FLOOR == 1.0
    for poll in (0.05, 0.2, 0.5):
        delays = [_governor(poll, 15.0, False).next_delay({}) for _ in range(50)]
        assert all(0.9 <= d <= 1.1 for d in delays), (poll, min(delays), max(delays))


def test_without_notifications_a_long_poll_interval_is_kept() -> None:
    delays = [_governor(3.0, 15.0, False).next_delay({}) for _ in range(50)]
    assert all(2.7 <= d <= 3.3 for d in delays)


def test_with_notifications_the_safety_net_interval() -> None:
    assert _governor(0.2, 15.0, True).next_delay({}) == 15.0
