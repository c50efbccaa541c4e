"""Conformance: a result that gives its attempt back (a hand-back, a snooze), written a
second time after its job was claimed again, applies nothing (issue 39, the audit's
suspicion S3).

A hand-back gives the attempt number back, so the next claim of the job, by the same
server, runs under the same server id and attempt number. Should the first write's
reply be lost, the completer writes the hand-back again; the fence (state, server,
attempt) matched the new claim, and the stale hand-back put a running job back in its
queue while its handler ran: two runs at once once another server took it. Such
results now also carry their claim's time, which the next claim changes.
"""

from __future__ import annotations

import pytest

from kiln._client._filters import filter_of
from kiln._model._job import JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result


@pytest.mark.parametrize("outcome", [Outcome.HANDED_BACK, Outcome.SNOOZED])
async def test_a_stale_give_back_retried_after_its_job_was_claimed_again_applies_nothing(
    store: Store, outcome: Outcome,
) -> None:
    [job_id] = await insert(store, job())
    [first] = await claim(store, server="s1")
    give_back = result(first, outcome)
    assert (await store.job_results_apply([give_back])).applied == 1
    if outcome is Outcome.SNOOZED:
        await store.jobs_make_due(filter_of(ids=[job_id]))  # the snooze is over
    [again] = await claim(store, server="s1")
    assert (again.id, again.attempt, again.server_id) == (first.id, first.attempt, "s1")
    # the first write's reply was lost: the completer writes it once more
    assert (await store.job_results_apply([give_back])).applied == 0
    row = await store.job_get(job_id)
    assert row is not None and row.state is JobState.RUNNING
    # the new claim's own give-back still applies
    assert (await store.job_results_apply([result(again, outcome)])).applied == 1
