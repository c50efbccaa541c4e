"""Conformance: "error contains" matches the attempts' error messages, nothing else.

Not the stored JSON around them (keys such as ``server_id``, ``attempt`` or ``at``,
timestamps, tracebacks), case-insensitively, non-ASCII letters included.
"""

from __future__ import annotations

from kiln._job import AttemptError, JobFilter, JobResult, JobState, Outcome
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
    rows = await store.job_list(JobFilter(error_contains=text), limit=50)
    assert await store.job_count(JobFilter(error_contains=text)) == len(rows)
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
    assert await store.jobs_requeue(JobFilter(states=failed, error_contains="server_id")) == 0
    assert await store.jobs_requeue(JobFilter(states=failed, error_contains="smtp")) == 1
    assert await store.jobs_cancel(JobFilter(error_contains="at")) == 0  # dns is failed
    assert await store.jobs_delete(JobFilter(states=failed, error_contains="attempt")) == 0
    assert await store.jobs_delete(JobFilter(states=failed, error_contains="dns")) == 1
    assert (await store.job_get(smtp)) is not None and (await store.job_get(dns)) is None
