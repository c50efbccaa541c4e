"""Conformance: tags are stored with a job, and JobFilter.tags (all of), .metadata and
.args (top-level keys equal to values) select the same jobs on every store, for
listing, counting and every bulk action, within the filter's upper bounds."""

from __future__ import annotations

import dataclasses

from kiln._model._job import JobFilter, JobState, Outcome
from kiln._model._unique import Unique
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result


async def _ids(store: Store, f: JobFilter) -> list[int]:
    rows = await store.job_list(f, limit=100)
    assert await store.job_count(f) == len(rows)
    return sorted(r.id for r in rows)


async def test_tags_are_stored_and_read_back(store: Store) -> None:
    tagged, plain = await insert(
        store, job(tags=("billing", "tenant:42", 'quo"te\\slash', "zürich")), job(),
    )
    row = await store.job_get(tagged)
    assert row is not None and row.tags == ["billing", "tenant:42", 'quo"te\\slash', "zürich"]
    other = await store.job_get(plain)
    assert other is not None and other.tags == []
    claimed = {r.id: r for r in await claim(store, limit=2)}
    assert claimed[tagged].tags == row.tags and claimed[plain].tags == []


async def test_tags_filter_needs_all_of_them(store: Store) -> None:
    both, one, none = await insert(
        store, job(tags=("a", "b")), job(tags=("a",)), job(),
    )
    assert await _ids(store, JobFilter(tags=("a",))) == [both, one]
    assert await _ids(store, JobFilter(tags=("a", "b"))) == [both]
    assert await _ids(store, JobFilter(tags=("b", "a"))) == [both]
    assert await _ids(store, JobFilter(tags=("c",))) == []
    assert await _ids(store, JobFilter(tags=('quo"te',))) == []
    assert await _ids(store, JobFilter()) == [both, one, none]


async def test_metadata_and_args_equality_on_top_level_keys(store: Store) -> None:
    ids = await insert(
        store,
        job(metadata={"tenant": 42, "region": "eu"}, args={"user": "ann", "n": 1}),
        job(metadata={"tenant": 42.0}, args={"user": "bob"}),
        job(metadata={"tenant": "42"}),
        job(metadata={"tenant": [42]}),
        job(metadata={"tenant": {"id": 42}}),
        job(metadata={"vip": True, "tenant": 7}),
        job(metadata={"vip": 1}),
        job(metadata={"nested": {"tenant": 42}}),
        job(args=[1, 2]),
    )
    num, flt, text, arr, obj, vip, one, _nested, _listy = ids
    assert await _ids(store, JobFilter(metadata={"tenant": 42})) == [num, flt]
    assert await _ids(store, JobFilter(metadata={"tenant": "42"})) == [text]
    assert await _ids(store, JobFilter(metadata={"tenant": 42, "region": "eu"})) == [num]
    assert await _ids(store, JobFilter(metadata={"vip": True})) == [vip]
    assert await _ids(store, JobFilter(metadata={"vip": 1})) == [one]
    assert await _ids(store, JobFilter(metadata={"region": "EU"})) == []
    assert await _ids(store, JobFilter(args={"user": "ann"})) == [num]
    assert await _ids(store, JobFilter(args={"n": 1}, metadata={"tenant": 42})) == [num]
    assert await _ids(store, JobFilter(args={"tenant": 42})) == []
    assert arr not in await _ids(store, JobFilter(metadata={"tenant": 42}))
    assert obj not in await _ids(store, JobFilter(metadata={"tenant": 42}))


async def test_keys_with_dots_spaces_and_other_characters(store: Store) -> None:
    dotted, spaced = await insert(
        store, job(metadata={"a.b": "x", "a": {"b": "y"}}), job(metadata={"the key $": "é"}),
    )
    assert await _ids(store, JobFilter(metadata={"a.b": "x"})) == [dotted]
    assert await _ids(store, JobFilter(metadata={"a.b": "y"})) == []
    assert await _ids(store, JobFilter(metadata={"the key $": "é"})) == [spaced]


async def test_bulk_actions_take_the_filters_within_their_bounds(store: Store) -> None:
    """An operator requeues "all failed jobs of tenant 42": only those, and only the ones
    up to the bound the confirmation showed."""
    ids = await insert(
        store, *(job(metadata={"tenant": 42 if i % 2 == 0 else 7}, tags=("t",),
                     max_attempts=1) for i in range(6)),
    )
    rows = await claim(store, limit=6)
    applied = await store.job_results_apply([result(r, Outcome.FAILED, error="x") for r in rows])
    assert applied.applied == 6
    tenant42 = JobFilter(states=(JobState.FAILED,), metadata={"tenant": 42}, tags=("t",))
    assert await _ids(store, tenant42) == [ids[0], ids[2], ids[4]]
    bounded = dataclasses.replace(tenant42, max_id=ids[2])
    assert await store.jobs_requeue(bounded) == 2
    assert [await _state(store, i) for i in ids] == [
        "available", "failed", "available", "failed", "failed", "failed"]
    tenant7 = JobFilter(metadata={"tenant": 7})
    assert await store.jobs_cancel(dataclasses.replace(tenant7, states=(JobState.FAILED,))) == 0
    assert await store.jobs_cancel(JobFilter(metadata={"tenant": 42})) == 2
    assert await store.jobs_delete(dataclasses.replace(tenant7, max_id=ids[3])) == 2
    assert await _ids(store, JobFilter()) == [ids[0], ids[2], ids[4], ids[5]]
    assert await store.jobs_delete(JobFilter(tags=("nope",))) == 0


async def _state(store: Store, job_id: int) -> str | None:
    row = await store.job_get(job_id)
    return None if row is None else row.state.value


async def test_unique_and_dependent_jobs_keep_their_tags(store: Store) -> None:
    u = Unique(by=("args",))
    spec = job(tags=("u",), args={"x": 1})
    spec.unique_key = u.key_of(spec.kind, spec.queue, spec.args)
    spec.unique_states = u.mask
    [unique_id] = await insert(store, spec)
    [dep] = await insert(store, job(tags=("d",), depends_on=[unique_id]))
    assert await _ids(store, JobFilter(tags=("u",))) == [unique_id]
    assert await _ids(store, JobFilter(tags=("d",), states=(JobState.AWAITING,))) == [dep]


async def test_filtered_pages_are_newest_first_and_keyset_paged(store: Store) -> None:
    ids = await insert(store, *(job(tags=("a",) if i % 3 else ("b",), metadata={"m": i % 2})
                                for i in range(12)))
    a = sorted((i for n, i in enumerate(ids) if n % 3), reverse=True)
    for f in (JobFilter(tags=("a",)), JobFilter(tags=("a",), states=(JobState.AVAILABLE,))):
        pages: list[int] = []
        before = None
        while True:
            page = await store.job_list(f, limit=3, before_id=before)
            pages += [r.id for r in page]
            if len(page) < 3:
                break
            before = page[-1].id
        assert pages == a
    ones = sorted((i for n, i in enumerate(ids) if n % 2), reverse=True)
    assert [r.id for r in await store.job_list(JobFilter(metadata={"m": 1}), limit=2)] \
        == ones[:2]


async def test_integers_past_two_to_the_53_match_exactly(store: Store) -> None:
    # 64-bit ids (snowflakes) that a double cannot tell apart: MariaDB's JSON_CONTAINS
    # compares numbers as doubles, so a bulk cancel for one user hit another's job
    big = 1234567890123456789
    alice, bob, small, max_ = await insert(
        store,
        job(metadata={"user_id": big}, args={"user_id": big}),
        job(metadata={"user_id": big + 1}, args={"user_id": big + 1}),
        job(metadata={"user_id": 42}),
        job(metadata={"user_id": 2**63 - 1}),
    )
    assert await _ids(store, JobFilter(metadata={"user_id": big})) == [alice]
    assert await _ids(store, JobFilter(args={"user_id": big + 1})) == [bob]
    assert await _ids(store, JobFilter(metadata={"user_id": -big})) == []
    assert await _ids(store, JobFilter(metadata={"user_id": 2**63 - 2})) == []
    assert await _ids(store, JobFilter(metadata={"user_id": 2**63 - 1})) == [max_]
    assert await _ids(store, JobFilter(metadata={"user_id": 42})) == [small]
    # at 2**53 itself: the double of 2**53 + 1 is 2**53 (the audit's filter table)
    edge, above = await insert(store, job(metadata={"n": 2**53}), job(metadata={"n": 2**53 + 1}))
    assert await _ids(store, JobFilter(metadata={"n": 2**53})) == [edge]
    assert await _ids(store, JobFilter(metadata={"n": 2**53 + 1})) == [above]
    assert await store.jobs_cancel(JobFilter(metadata={"user_id": big}, max_id=max_)) == 1
    states = {i: (await store.job_get(i)) for i in (alice, bob)}
    assert {i: r.state if r else None for i, r in states.items()} == {
        alice: JobState.CANCELLED, bob: JobState.AVAILABLE}
