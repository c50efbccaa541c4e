"""JSON that some store cannot write: a NUL (PostgreSQL), a lone surrogate (every store's
UTF-8), lists and dicts nested past MariaDB's 32 levels. Args and metadata with them
are refused with a ValidationError naming the field, before anything is written, on
every store (every producer gets the same answer whatever its database); a result with
them fails its attempt with a ResultError on the worker, retried, on every store."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

import kiln
from kiln._model._build import build_job
from kiln._model._job import NewJob
from kiln._model._json import MAX_DEPTH, canonical, depth, encode
from kiln._model._results import encoded
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.waits import wait_for


def nested(levels: int, inner: Any = 1) -> Any:
    value = inner
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


BAD: list[tuple[str, Any, str]] = [
    ("nul", {"name": "a\x00b"}, "contains a NUL character (U+0000)"),
    ("nul-key", {"a\x00": 1}, "contains a NUL character (U+0000)"),
    ("surrogate", {"name": "\ud800"}, "contains '\\ud800', a lone surrogate"),
    ("deep", nested(MAX_DEPTH + 1), f"more than {MAX_DEPTH} levels deep"),
]


@pytest.mark.parametrize(("value", "says"), [(v, s) for _, v, s in BAD],
                         ids=[name for name, _, _ in BAD])
async def test_args_and_metadata_no_store_can_write_are_refused(
    store_url: str, value: Any, says: str
) -> None:
    app = kiln.App(store_url, known_kinds_only=False)
    await app.amigrate()
    try:
        client = app.client()
        for field, call in (
            ("args", lambda: client.enqueue("k", value)),
            ("metadata", lambda: client.enqueue("k", {}, metadata={"m": value})),
            ("args", lambda: app.aenqueue_many([("k", {}), ("k", value)])),
            ("args", lambda: app.aenqueue_many([("k", {}), ("k", value, {"priority": 1})])),
            ("args", lambda: client.enqueue_many([NewJob("k", {}), NewJob("k", value)])),
            ("metadata", lambda: client.enqueue_many([NewJob("k", {}, metadata={"m": value})])),
        ):
            with pytest.raises(kiln.ValidationError) as raised:
                await call()
            assert str(raised.value).startswith(f"{field} cannot be stored: it ")
            assert says in str(raised.value)
        assert await client.count(kiln.filter_of()) == 0  # nothing of any call written
    finally:
        await app.aclose()
        app.close()


def test_the_depth_bound_is_mariadbs() -> None:
    """MariaDB's JSON holds 31 nested lists and dicts (32 levels with the values in
    them): that is accepted everywhere, and one more is refused everywhere."""
    assert depth(1) == 0 and depth([]) == 1 and depth({"a": [1, {"b": []}]}) == 4
    assert depth(nested(MAX_DEPTH)) == MAX_DEPTH == 31
    build_job("k", nested(31), None, metadata={"m": nested(30)})
    build_job("k", [[1]] * 40, None)  # many brackets, little depth: walked, and accepted
    with pytest.raises(kiln.ValidationError, match="metadata cannot be stored"):
        build_job("k", {}, None, metadata={"m": nested(31)})  # 32 with the metadata's dict
    assert encoded(nested(31), 10_000, 1, "k")
    with pytest.raises(kiln.ResultError, match="more than 31 levels deep"):
        encoded(nested(32), 10_000, 1, "k")
    assert encoded("\\u0000", 100, 1, "k") == '"\\\\u0000"'  # a backslash, not a NUL


async def test_a_result_nested_too_deep_fails_its_attempt_on_every_store(store_url: str) -> None:
    """MariaDB refused it at the write, which recorded the completed job as failed
    without a retry; PostgreSQL and SQLite stored what MariaDB cannot. Now the worker
    refuses it on every store: a ResultError, retried."""
    app = kiln.App(store_url)

    @app.job("deep", max_attempts=2, backoff=kiln.Constant(0))
    async def deep(job: kiln.Job) -> Any:
        return nested(40)

    store = await open_store(store_url)
    try:
        job_id = await app.aenqueue("deep", {})
        running = await Running(app.server(queues={"default": 2}, config=config())).started()
        try:
            row = await wait_for(lambda: _finished(store, job_id), 15, "the job to fail")
        finally:
            await running.stop()
        assert row.state is kiln.JobState.FAILED and row.attempt == 2  # retried once
        assert all("more than 31 levels deep" in e.error for e in row.errors), row.errors
    finally:
        await store.close()
        await app.aclose()
        app.close()


async def _finished(store: Any, job_id: int) -> kiln.JobRow | None:
    row = await job_of(store, job_id)
    return row if row.state.value in ("completed", "failed") else None


@pytest.mark.parametrize("by", [("args",), ("args.filter",)])
def test_unique_keys_do_not_depend_on_the_order_a_dict_was_built_in(by: tuple[str, ...]) -> None:
    """{"a": 1, "b": 2} and {"b": 2, "a": 1} are one key, at any depth, through the
    single enqueue (key_of) and a batch's template (keyer) alike."""
    unique = kiln.Unique(by=by)
    one = {"filter": {"region": "eu", "tier": [1, {"x": 1, "y": 2}]}, "n": 1}
    two = {"n": 1, "filter": {"tier": [1, {"y": 2, "x": 1}], "region": "eu"}}
    keyer = unique.keyer("k", "q")
    keys = {unique.key_of("k", "q", one), unique.key_of("k", "q", two), keyer(one), keyer(two)}
    assert len(keys) == 1
    # a list's order counts
    other = {"n": 1, "filter": {"tier": [{"y": 2, "x": 1}, 1], "region": "eu"}}
    assert unique.key_of("k", "q", other) not in keys
    assert canonical({1: "a", "b": 2}) == '{"1":"a","b":2}'  # keys of mixed types


def test_keys_without_unsorted_dicts_are_the_ones_stored_before() -> None:
    """The upgrade note's promise: a key whose parts hold no dict with keys out of
    sorted order (scalars, lists, sorted dicts, the queue, a key of your own) hashes
    the same text as before canonical JSON, so queued jobs keep matching it (the
    values: kiln before this change)."""
    before: list[tuple[tuple[str, ...], Any, str]] = [
        (("args.tenant",), {"tenant": 42}, "3c0412db03a0d619b627e9018701d8c83078afcd"),
        (("args",), {"a": 1, "b": [1, 2]}, "82fdf98a4c24f464785c5b914b417791619a9964"),
        (("args",), [1, "x"], "87f03db295d1cada3b2a3871c4d126cf35888f05"),
    ]
    for by, args, key in before:
        assert kiln.Unique(by=by).key_of("k", "q", args) == key
        assert kiln.Unique(by=by).keyer("k", "q")(args) == key
    given = kiln.Unique(key="nightly").key_of("k", "q", {"b": 1, "a": 2})
    assert given == "dcfb326eb04c25f134cbffd1b56867ca7afbdf9f"


async def test_jobs_queued_before_canonical_keys_keep_the_key_they_were_stored_with(
    store_url: str,
) -> None:
    """The upgrade note, on every store: a job queued by a kiln before canonical keys
    holds the key it was stored with. Args whose dicts were built in sorted key order
    hash as before (its duplicate is still found); other args do not, so one more job
    of that key is inserted beside the old one (until the old one finishes)."""
    unique = kiln.Unique()
    app = kiln.App(store_url, known_kinds_only=False)
    await app.amigrate()
    try:
        for args, found in (({"a": 1, "b": 2}, True), ({"b": 2, "a": 1}, False)):
            old = build_job("k", args, None, unique=unique)
            old.unique_key = _key_before_canonical("k", args)  # as the old kiln stored it
            [queued] = await app.client().enqueue_many([old])
            again = await app.aenqueue("k", args, unique=unique)
            assert (again == queued and not again.inserted) is found
    finally:
        await app.aclose()
        app.close()


def _key_before_canonical(kind: str, args: Any) -> str:
    """Unique().key_of before this change: the args' JSON in their insertion order."""
    return hashlib.sha256(encode([kind, None, ["args", args]]).encode()).hexdigest()[:40]
