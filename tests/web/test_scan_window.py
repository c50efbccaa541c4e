"""The Available tab and args filters scan a window of ids a page (kiln.web._jobs
.scan_window): no index serves them in id order, so a page over millions of newer
scheduled jobs walked them all (2.1 to 3.0 s at 3,000,000, bench/RESULTS.md). A page
that runs out of its window says which ids it searched and links to the next window;
following the links reaches every match once. Here the window is 5 ids."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from kiln import Client
from kiln.web import _jobs


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jobs, "SCAN_IDS", 5)


def _ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'name="ids" value="(\d+)"', page)]


def _older(page: str) -> str | None:
    found = re.search(r'href="[^"]*/jobs\?([^"]+)" rel="next"', page)
    return html.unescape(found.group(1)) if found else None


async def _walk(http: httpx.AsyncClient, query: str) -> tuple[list[int], int]:
    """Every id the pages list, following "Older", and how many pages said they ran
    out of their window."""
    seen, notes, next_query = [], 0, query
    for _ in range(20):
        page = (await http.get(f"/jobs?{next_query}")).text
        seen += _ids(page)
        notes += 'id="scan-note"' in page
        older = _older(page)
        if older is None:
            return seen, notes
        next_query = older
    raise AssertionError("no end of the pages")


async def test_the_available_tab_pages_through_windows_of_ids(
        client: Client, http: httpx.AsyncClient) -> None:
    [old] = [await client.enqueue("backlog.job", {"n": 0}, queue="q")]
    for n in range(8):  # newer scheduled jobs above the available one
        await client.enqueue("later.job", {"n": n}, queue="q", delay=3600)
    first = (await http.get("/jobs?state=available")).text
    assert _ids(first) == [] and 'id="scan-note"' in first
    assert "Searched the 5 ids below" in first
    seen, notes = await _walk(http, "state=available")
    assert seen == [old] and notes >= 1


async def test_an_args_filter_finds_every_match_once_across_windows(
        client: Client, http: httpx.AsyncClient) -> None:
    ids = [await client.enqueue("a.job", {"n": n % 3}, queue="q") for n in range(13)]
    want = sorted((i for n, i in enumerate(ids) if n % 3 == 1), reverse=True)
    seen, notes = await _walk(http, "arg=n%3D1")
    assert seen == want and notes >= 1
    # other tabs page by rows as before: no window, no note
    everything = (await http.get("/jobs")).text
    assert 'id="scan-note"' not in everything and len(_ids(everything)) == 13


async def test_the_api_says_which_ids_it_searched(
        client: Client, http: httpx.AsyncClient) -> None:
    [old] = [await client.enqueue("backlog.job", {}, queue="q")]
    for n in range(8):
        await client.enqueue("later.job", {"n": n}, queue="q", delay=3600)
    seen, query = [], "state=available"
    for _ in range(5):
        body = (await http.get(f"/api/jobs?{query}")).json()
        seen += [j["id"] for j in body["jobs"]]
        if body["next"] is None:
            break
        assert body["searched"]["below_id"] - body["searched"]["from_id"] == 5
        query = body["next"]
    assert seen == [old] and body["searched"] is None  # the last window: ids from 1
    assert (await http.get("/api/jobs")).json()["searched"] is None
