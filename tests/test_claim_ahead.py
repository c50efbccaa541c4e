"""ClaimAhead, the pool's claim-ahead policy, on numbers alone: no store, no clock."""

from __future__ import annotations

import pytest

from kiln._server._claim_ahead import AHEAD_MAX, AHEAD_STALL, AHEAD_WAIT, ClaimAhead


def test_claims_no_more_than_its_slots_until_a_job_has_finished() -> None:
    policy = ClaimAhead()
    assert policy.ahead(4) == 0
    assert policy.room(4, held=1) == 3
    assert policy.target(4) == 4


@pytest.mark.parametrize(("average", "ahead"), [
    (AHEAD_WAIT, 4),  # one job per slot in AHEAD_WAIT
    (AHEAD_WAIT / 4, 16),  # four per slot
    (AHEAD_WAIT * 4 * 1.5, 0),  # slower than concurrency x AHEAD_WAIT: none
    (1e-9, AHEAD_MAX * 4),  # capped
    (0.0, AHEAD_MAX * 4),
])
def test_claims_ahead_what_its_slots_get_through_in_ahead_wait(average: float,
                                                               ahead: int) -> None:
    policy = ClaimAhead()
    policy.observe(average)
    assert policy.ahead(4) == ahead
    assert policy.room(4, held=4) == ahead  # every slot taken: the room is what is ahead
    assert policy.target(4) == max(4, (4 + ahead) // 2)


def test_the_average_is_smoothed_and_forgotten() -> None:
    policy = ClaimAhead()
    policy.observe(1.0)
    policy.observe(2.0)
    assert policy.average == pytest.approx(1.1)  # the latest weighs 0.1
    policy.forget()
    assert policy.average is None and policy.ahead(4) == 0


def test_waiting_jobs_stall_after_ahead_stall_and_shorten_the_sleep() -> None:
    assert not ClaimAhead.stalled(AHEAD_STALL / 2)
    assert ClaimAhead.stalled(AHEAD_STALL)
    assert ClaimAhead.patience(5.0, waiting=True) == AHEAD_STALL
    assert ClaimAhead.patience(5.0, waiting=False) == 5.0
    assert ClaimAhead.patience(0.05, waiting=True) == 0.05
