"""Stale views (issue 21, defect 11): every count on a page says how old it is, and the
first page after an idle period shows current counts, not the previous request's."""

from __future__ import annotations

import asyncio
import re

import httpx

from kiln import Client
from tests.support.web import MakeHttp, fail_jobs

AGE = re.compile(r'<span class="as-of" data-age="([0-9.]+)">as of <time datetime="[^"]+">'
                 r"\d\d:\d\d:\d\d UTC</time>")
TTL = 0.2


def _failed_card(page: str) -> int:
    match = re.search(r'card-failed"[^>]*>\s*<span class="n">([\d,]+)</span>', page)
    assert match, "no failed card"
    return int(match.group(1).replace(",", ""))


def _failed_tab(page: str) -> int:
    match = re.search(r'tab-failed[^>]*>Failed <span class="count">([\d,]+)</span>', page)
    assert match, "no failed tab"
    return int(match.group(1).replace(",", ""))


async def test_first_page_after_idle_shows_current_counts(
    make_http: MakeHttp, client: Client
) -> None:
    http: httpx.AsyncClient = make_http(count_ttl=TTL)
    await fail_jobs(client, 2)
    assert _failed_card((await http.get("/")).text) == 2
    await fail_jobs(client, 3, queue="other")  # failed meanwhile, not through the dashboard
    await asyncio.sleep(2 * TTL + 0.1)  # the dashboard sits idle
    overview = (await http.get("/")).text
    assert _failed_card(overview) == 5  # not the 2 of the previous request
    assert _failed_tab((await http.get("/jobs?state=failed")).text) == 5


async def test_every_count_shows_its_age(make_http: MakeHttp, client: Client) -> None:
    http: httpx.AsyncClient = make_http(count_ttl=60.0)
    await fail_jobs(client, 1)
    for path, sections in (("/", 4), ("/jobs", 1), ("/jobs?state=failed", 1), ("/queues", 2)):
        page = (await http.get(path)).text
        ages = [float(a) for a in AGE.findall(page)]
        assert len(ages) >= sections, (path, ages)
        assert all(0 <= a < 60 for a in ages), (path, ages)
