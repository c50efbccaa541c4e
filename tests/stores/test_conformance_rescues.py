"""Conformance: the rescue counter counts rescues since the job's last real attempt.

A hand-back (shutdown, claim-ahead, fencing) ends no attempt, so it must neither add to
the counter nor reset it: a job that takes its server down and is handed back by the
next one in between must still wait for its backoff on its second rescue in a row.
"""

from __future__ import annotations

import pytest

from kiln._model._job import JobRow, Outcome
from kiln._server.maintenance.rescuer import rescue_result
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result


async def _rescued(store: Store, server: str) -> JobRow:
    """Claim the job on ``server`` and write the result a rescuer would."""
    [row] = await claim(store, server=server)
    applied = await store.job_results_apply([rescue_result(row, server, None)])
    assert applied.applied == 1
    got = await store.job_get(row.id)
    assert got is not None
    return got


async def test_a_hand_back_keeps_the_rescue_count(store: Store) -> None:
    await insert(store, job(max_attempts=10))
    first = await _rescued(store, "s1")
    assert first.rescues == 1
    [row] = await claim(store, server="s2")  # claimed ahead, then handed back unstarted
    assert (await store.job_results_apply([result(row, Outcome.HANDED_BACK)])).applied == 1
    got = await store.job_get(row.id)
    assert got is not None and got.rescues == 1 and got.attempt == row.attempt - 1
    [row] = await claim(store, server="s3")
    assert row.rescues == 1
    second = rescue_result(row, "s3", None)
    assert second.outcome is Outcome.RETRY and second.run_at_delay > 0  # the pause holds
    await store.job_results_apply([second])
    got = await store.job_get(row.id)
    assert got is not None and got.rescues == 2


@pytest.mark.parametrize(
    "outcome", [Outcome.COMPLETED, Outcome.RETRY, Outcome.FAILED, Outcome.SNOOZED]
)
async def test_a_real_attempt_resets_the_rescue_count(store: Store, outcome: Outcome) -> None:
    [job_id] = await insert(store, job(max_attempts=10))
    await _rescued(store, "s1")
    [row] = await claim(store, server="s2")
    await store.job_results_apply([result(row, outcome, error="boom")])
    got = await store.job_get(job_id)
    assert got is not None and got.rescues == 0


async def test_a_hand_back_of_a_job_never_rescued_leaves_zero(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.HANDED_BACK)])
    got = await store.job_get(job_id)
    assert got is not None and got.rescues == 0
