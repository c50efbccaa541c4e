"""Tags at enqueue and in a kind's declaration, and the tag / metadata / args filters of
the Client: bad input gets an error that names the problem and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

import kiln
from kiln._client._filters import filter_of
from kiln._model._build import build_job
from kiln._model._kinds import Declaration, make_kind
from kiln._model._tags import parse_pair
from kiln.stores import Store

BAD_TAGS: list[tuple[Any, str]] = [
    ("billing", "must be a list of strings"),
    ([""], "a tag must be a non-empty string"),
    (["  "], "a tag must be a non-empty string"),
    ([" lead"], "starts or ends with whitespace"),
    (["x" * 101], "101 characters long; the limit is 100"),
    ([f"t{i}" for i in range(21)], "21 tags; the limit is 20"),
    (["bell\x07"], r"U\+0007 .*a name is 1 to 100 characters"),
    ([42], "a tag must be a non-empty string"),
]


async def test_bad_tags_are_refused_before_anything_is_written(store: Store) -> None:
    client = kiln.Client(store)
    for tags, message in BAD_TAGS:
        with pytest.raises(kiln.ValidationError, match=message):
            await client.enqueue("k", {}, tags=tags)
        with pytest.raises(kiln.ValidationError, match=message):
            await client.enqueue_many([kiln.NewJob("k", {}, tags=tags)])
        with pytest.raises(kiln.ValidationError, match=message):
            make_kind("k", lambda job: None, tags=tags)
    assert await client.count(kiln.JobFilter()) == 0


async def test_tags_are_kept_in_order_without_duplicates(store: Store) -> None:
    client = kiln.Client(store)
    job_id = await client.enqueue("k", {}, tags=("b", "a", "b"))
    row = await client.get(job_id)
    assert row is not None and row.tags == ["b", "a"]


BAD_FILTERS: list[tuple[dict[str, Any], str]] = [
    ({"tags": [""]}, "a tag must be a non-empty string"),
    ({"tags": "billing"}, "must be a list of strings"),
    ({"metadata": {"tenant": [42]}}, "compare with a string, a number or a boolean"),
    ({"metadata": {"tenant": None}}, "compare with a string, a number or a boolean"),
    ({"metadata": {"": 1}}, "metadata filter key must be a non-empty string"),
    ({"metadata": {'a"b': 1}}, "quote or a backslash"),
    ({"args": {"n": float("nan")}}, "not a finite number"),
    ({"args": {"n": 2**64}}, "64-bit"),
    ({"args": [("n", 1)]}, "must be a mapping"),
    ({"metadata": {f"k{i}": 1 for i in range(21)}}, "21 keys; the limit is 20"),
]


async def test_bad_filters_are_refused_by_every_call(store: Store) -> None:
    client = kiln.Client(store)
    await client.enqueue("k", {"n": 1}, metadata={"tenant": 42}, tags=["billing"])
    for fields, message in BAD_FILTERS:
        with pytest.raises(kiln.ValidationError, match=message):
            filter_of(**fields)
        given: dict[str, Any] = {k: tuple(v) if k == "tags" and not isinstance(v, str) else v
                                 for k, v in fields.items()}
        f = kiln.JobFilter(**given)
        for call in (client.list, client.count, client.requeue, client.cancel, client.delete):
            with pytest.raises(kiln.ValidationError, match=message):
                await call(f)
    assert await client.count(kiln.JobFilter(tags=("billing",))) == 1
    assert await store.audit_list() == []


def test_an_unknown_filter_key_names_the_known_ones() -> None:
    with pytest.raises(kiln.ValidationError, match=r"unknown filter key\(s\): tag; use ids,"):
        filter_of(tag=["billing"])  # type: ignore[call-arg]


def test_tags_given_at_enqueue_replace_the_declared_ones() -> None:
    kind = make_kind("k", lambda job: None, tags=["a", "b"])
    assert build_job("k", {}, {"k": kind}).tags == ("a", "b")
    assert build_job("k", {}, {"k": kind}, tags=["c"]).tags == ("c",)
    assert build_job("k", {}, {"k": kind}, tags=[]).tags == ()
    published = Declaration.of(kind.declaration())
    assert published.tags == ("a", "b")
    assert build_job("k", {}, None, published).tags == ("a", "b")


def test_a_kind_without_tags_publishes_the_digest_it_had() -> None:
    """So servers of an older kiln and this one do not look like a conflict."""
    declaration = make_kind("k", lambda job: None, queue="mail").declaration()
    assert "tags" not in declaration.options
    assert make_kind("k", lambda job: None, queue="mail", tags=["x"]).declaration().digest \
        != declaration.digest


@pytest.mark.parametrize(("text", "pair"), [
    ("tenant=42", ("tenant", 42)), ('tenant="42"', ("tenant", "42")),
    ("vip=true", ("vip", True)), ("region=eu", ("region", "eu")),
    ("ratio=0.5", ("ratio", 0.5)), ("list=[1]", ("list", "[1]")),
    ("a=b=c", ("a", "b=c")), ("empty=", ("empty", "")), ("n=null", ("n", "null")),
])
def test_key_value_pairs_read_json_scalars(text: str, pair: tuple[str, Any]) -> None:
    assert parse_pair(text, "--meta") == pair
