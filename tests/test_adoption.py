"""kiln._model._adoption without a database: which options a job enqueued without a
declaration marks as defaulted, what a declaration gives such jobs, and which waiting
jobs a changed limit rekeys; and the kinds whose limit changed at a publish."""

from __future__ import annotations

import logging

import pytest

import kiln
from kiln._model import _adoption as bits
from kiln._model._adoption import WaitingJob, adoption, rekeyed
from kiln._model._build import build_job
from kiln._model._job import KindDeclaration
from kiln._model._kinds import Declaration, make_kind
from kiln._server.maintenance.adopter import limits_changed

ALL = (bits.QUEUE | bits.MAX_ATTEMPTS | bits.PRIORITY | bits.TIMEOUT | bits.TAGS | bits.RATE
       | bits.CONCURRENCY)


def waiting(job_id: int, args: object, key: str | None = None) -> WaitingJob:
    return WaitingJob(id=job_id, kind="k", args=args, conc_key=key, defaulted=ALL)


def test_a_job_without_a_declaration_marks_every_option_it_did_not_give() -> None:
    assert build_job("k", {}, None).defaulted == ALL
    given = build_job("k", {}, None, queue="mail", max_attempts=3, rate_key="stripe")
    assert given.defaulted == ALL & ~bits.QUEUE & ~bits.MAX_ATTEMPTS & ~bits.RATE
    assert build_job("k", {}, None, tags=[], priority=1, timeout=5).defaulted == (
        bits.QUEUE | bits.MAX_ATTEMPTS | bits.RATE | bits.CONCURRENCY)


def test_a_job_with_a_declaration_or_unique_marks_nothing() -> None:
    kind = make_kind("k", lambda job: None, queue="mail")
    assert build_job("k", {}, {"k": kind}).defaulted == 0
    published = Declaration.of(kind.declaration())
    assert build_job("k", {}, None, published).defaulted == 0
    assert build_job("k", {}, None, unique=kiln.Unique()).defaulted == 0


def test_an_adoption_carries_the_declaration_and_each_job_s_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kind = make_kind("k", lambda job: None, queue="mail", max_attempts=2, priority=-1,
                     timeout=30, tags=["a"], rate_limit=kiln.RateLimit(rate=5),
                     concurrency=kiln.Concurrency(max=2, key="args.t"))
    with caplog.at_level(logging.WARNING, logger="kiln.adopter"):
        a = adoption(kind, [waiting(1, {"t": "x"}), waiting(2, {})])
    assert (a.kind, a.ids, a.queue, a.max_attempts, a.priority, a.timeout, a.tags) == (
        "k", (1, 2), "mail", 2, -1, 30, ("a",))
    assert (a.rate_key, a.keys, a.conc_max) == ("k", {1: 'kind:k|"x"'}, 2)
    assert "job 2 of kind 'k' gets no concurrency key" in caplog.text
    plain = adoption(make_kind("k", lambda job: None), [waiting(1, {})])
    assert (plain.rate_key, plain.keys, plain.conc_max) == (None, {}, 0)


def test_rekeyed_names_the_jobs_whose_key_differs() -> None:
    limit = kiln.Concurrency(max=1, key="args.t")
    jobs = [waiting(1, {"t": 1}), waiting(2, {"t": 2}, "kind:k|2"), waiting(3, {"t": 3}, "kind:k")]
    assert rekeyed("k", limit, jobs) == {1: "kind:k|1", 3: "kind:k|3"}
    assert rekeyed("k", kiln.Concurrency(max=1), jobs) == {
        1: "kind:k", 2: "kind:k"}


def test_limits_changed_are_the_limited_kinds_published_otherwise_before() -> None:
    kinds = {
        "same": make_kind("same", lambda job: None, concurrency=kiln.Concurrency(max=2)),
        "raised": make_kind("raised", lambda job: None, concurrency=kiln.Concurrency(max=3)),
        "added": make_kind("added", lambda job: None, concurrency=kiln.Concurrency(max=1)),
        "new": make_kind("new", lambda job: None, concurrency=kiln.Concurrency(max=1)),
        "none": make_kind("none", lambda job: None),
    }
    before = [
        KindDeclaration("same", {"concurrency": {"max": 2, "key": None}}, "d"),
        KindDeclaration("raised", {"concurrency": {"max": 1, "key": None}}, "d"),
        KindDeclaration("added", {}, "d"),
        KindDeclaration("none", {"concurrency": {"max": 1, "key": None}}, "d"),
    ]
    assert limits_changed(kinds, before) == {"raised", "added", "new"}
