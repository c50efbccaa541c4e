"""Counts above the cap are estimates (PostgreSQL's capped counts, kiln.stores.postgres.
_counts): the pages mark each with "~" and say what it means, /api/overview lists them,
and exact figures stay unmarked. The store's estimates themselves are checked in
tests/stores/test_postgres_count_plans.py; here the client marks every count over 2 as
an estimate, as PostgreSQL does above its cap, on every store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import httpx
import pytest

from kiln import Client
from kiln._model._job import KIND_COUNT_CAP, JobState, KindCount, StateCount

NOTE = '"~" marks an estimate'


@pytest.fixture
def estimating(client: Client, monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    asked: list[int | None] = []
    counts = client.counts

    async def capped(states: Sequence[JobState] | None = None, *,
                     cap: int | None = None) -> list[StateCount]:
        asked.append(cap)
        return [dataclasses.replace(c, estimated=True) if c.count > 2 else c
                for c in await counts(states, cap=cap)]

    monkeypatch.setattr(client, "counts", capped)
    return asked


async def test_estimates_are_marked_and_exact_counts_are_not(
    client: Client, estimating: list[int | None], http: httpx.AsyncClient
) -> None:
    await client.enqueue_many([("bulk.job", {"n": n}, {"queue": "big"}) for n in range(5)])
    await client.enqueue("small.job", {}, queue="small")
    overview = (await http.get("/")).text
    assert estimating and set(estimating) == {100}  # the dashboard asks for the cap
    assert "~5" in overview and NOTE in overview
    assert ">1<" in overview.replace(" ", "")  # the small queue's exact 1, unmarked
    jobs = (await http.get("/jobs?queue=small")).text
    assert "~" not in jobs.split('class="tabs"')[1].split("</nav>")[0] and NOTE not in jobs
    tabs = (await http.get("/jobs")).text.split('class="tabs"')[1].split("</nav>")[0]
    # All and Available: 6 jobs, of which the big queue's 5 are "estimated"
    assert 'All <span class="count">~6<' in tabs
    assert 'Available <span class="count">~6<' in tabs
    queues = (await http.get("/queues")).text
    assert "~5" in queues and NOTE in queues
    api = (await http.get("/api/overview")).json()
    assert api["estimated"] == ["big/available"] and api["states"]["available"] == 6


async def test_the_kinds_page_marks_estimated_kind_counts(
    client: Client, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kinds page reads ``Client.kind_counts`` (exact up to KIND_COUNT_CAP a state,
    estimated above on PostgreSQL): here every count over 2 is marked an estimate."""
    asked: list[int] = []
    kind_counts = client.kind_counts

    async def capped(cap: int = KIND_COUNT_CAP) -> list[KindCount]:
        asked.append(cap)
        return [dataclasses.replace(c, estimated=True) if c.count > 2 else c
                for c in await kind_counts(cap)]

    monkeypatch.setattr(client, "kind_counts", capped)
    await client.enqueue_many([("bulk.job", {"n": n}, {"queue": "big"}) for n in range(5)])
    await client.enqueue("small.job", {}, queue="small")
    page = (await http.get("/kinds")).text
    assert asked == [KIND_COUNT_CAP]
    assert ">~5<" in page.replace(" ", "") and NOTE in page
    assert ">1<" in page.replace(" ", "")  # small.job's exact 1, unmarked
    api = {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}
    assert api["bulk.job"]["estimated"] == ["available"] and api["small.job"]["estimated"] == []
