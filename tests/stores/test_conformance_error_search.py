"""Conformance: "error contains" matches the attempts' error messages, nothing else.

Not the stored JSON around them (keys such as ``server_id``, ``attempt`` or ``at``,
timestamps, tracebacks), case-insensitively, non-ASCII letters included.
"""

from __future__ import annotations

from kiln._model._job import AttemptError, JobFilter, JobResult, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job

TRACEBACK = 'Traceback (most recent call last):\n  File "pay.py", line 9, in charge\n'


async def _failed(store: Store, *messages: str) -> list[int]:
    """One failed job per message, its error recorded as a server writes it."""
    ids = await insert(store, *(job(args={"n": i}) for i in range(len(messages))))
    rows = {r.id: r for r in await claim(store, limit=len(messages), server="server-7f3a")}
    results = [
        JobResult(
            job_id=i, server_id="server-7f3a", attempt=rows[i].attempt, outcome=Outcome.FAILED,
            error=AttemptError(rows[i].attempt, 1733220000.5, message,
                               TRACEBACK + "TracebackOnlyWord", "server-7f3a"),
        )
        for i, message in zip(ids, messages, strict=True)
    ]
    assert (await store.job_results_apply(results)).applied == len(messages)
    return ids


async def _found(store: Store, text: str) -> list[int]:
    rows = await store.job_list(JobFilter(error=text), limit=50)
    assert await store.job_count(JobFilter(error=text)) == len(rows)
    return sorted(r.id for r in rows)


async def test_error_search_ignores_the_json_around_the_messages(store: Store) -> None:
    smtp, dns, zurich = await _failed(
        store, "SMTP timeout", "DNS failure: no data for mx.example.com",
        "Zahlung in ZÜRICH abgelehnt",
    )
    for text in ("server_id", "attempt", "traceback", "server-7f3a", "1733220000", '":', "{",
                 "TracebackOnlyWord", "pay.py"):
        assert await _found(store, text) == [], text
    assert await _found(store, "at") == [dns]  # "data"; the others have "at" in their JSON
    assert await _found(store, "smtp TIMEOUT") == [smtp]
    assert await _found(store, "zürich") == [zurich]  # non-ASCII folds case too
    assert await _found(store, "ÜRICH ABG") == [zurich]
    assert await _found(store, "100%_") == []


async def test_error_search_matches_any_attempt_and_special_characters(store: Store) -> None:
    [first] = await insert(store, job(max_attempts=3))
    for message in ('quote " and back\\slash', "line one\nline two"):
        [row] = await claim(store)
        applied = await store.job_results_apply([JobResult(
            job_id=first, server_id="s1", attempt=row.attempt, outcome=Outcome.RETRY,
            error=AttemptError(row.attempt, 0.0, message, "", "s1"),
        )])
        assert applied.applied == 1
        await store.jobs_requeue(JobFilter(ids=(first,)))  # claimable again at once
    assert await _found(store, 'quote " and') == [first]
    assert await _found(store, "back\\sl") == [first]
    assert await _found(store, "one\nline") == [first]
    assert await _found(store, "two") == [first]


async def test_bulk_actions_use_the_same_error_match(store: Store) -> None:
    smtp, dns = await _failed(store, "SMTP timeout", "DNS failure")
    failed = (JobState.FAILED,)
    assert await store.jobs_requeue(JobFilter(states=failed, error="server_id")) == 0
    assert await store.jobs_requeue(JobFilter(states=failed, error="smtp")) == 1
    assert await store.jobs_cancel(JobFilter(error="at")) == 0  # dns is failed
    assert await store.jobs_delete(JobFilter(states=failed, error="attempt")) == 0
    assert await store.jobs_delete(JobFilter(states=failed, error="dns")) == 1
    assert (await store.job_get(smtp)) is not None and (await store.job_get(dns)) is None


async def test_error_groups_by_last_error_exactly_and_bounded(store: Store) -> None:
    """Failed jobs grouped by their last attempt's error message, the most common first,
    over the newest ``scan`` failed jobs only; ``last_error`` selects one group, exactly
    (special characters and non-ASCII letters included, never a substring)."""
    odd = 'ZÜRICH "quoted" \\ and\nnewline'
    ids = await _failed(store, "SMTP timeout", odd, "SMTP timeout", "SMTP timeout x", odd,
                        "SMTP timeout")
    groups = await store.job_error_groups(JobFilter(), limit=10)
    assert groups == [("SMTP timeout", 3, ids[5]), (odd, 2, ids[4]),
                      ("SMTP timeout x", 1, ids[3])]
    assert await store.job_error_groups(JobFilter(), limit=1) == [("SMTP timeout", 3, ids[5])]
    assert sorted(r.id for r in await store.job_list(JobFilter(last_error=odd), 50)) == [
        ids[1], ids[4]]
    assert await store.job_count(JobFilter(last_error="SMTP timeout")) == 3
    assert await store.job_count(JobFilter(last_error="SMTP")) == 0
    assert await store.job_count(JobFilter(last_error="smtp timeout")) == 0  # exact
    # bounded: the newest two failed jobs (all six finished at one instant: any two)
    assert sum(n for _e, n, _m in await store.job_error_groups(JobFilter(), 10, scan=2)) == 2
    # the filter applies: one group of the given ids
    assert await store.job_error_groups(JobFilter(ids=(ids[1],)), 10) == [(odd, 1, ids[1])]
    [retried] = await insert(store, job(max_attempts=2))
    [row] = await claim(store)
    await store.job_results_apply([JobResult(
        job_id=retried, server_id="s1", attempt=row.attempt, outcome=Outcome.RETRY,
        error=AttemptError(row.attempt, 0.0, "first attempt", "", "s1"), run_at_delay=3600)])
    # not failed: no group; its last error still selects it for a listing
    assert "first attempt" not in [e for e, _n, _m in
                                   await store.job_error_groups(JobFilter(), 10)]
    assert await store.job_count(JobFilter(last_error="first attempt")) == 1
