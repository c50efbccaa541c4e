"""Issue 44 N9 (rest): a relative time range is pinned in the next-page links, so paging
does not slide the window; a range whose start is not before its end is a 400, not a
silently empty list. And N13: a 503 names no database address."""

from __future__ import annotations

import html
from urllib.parse import parse_qs

import httpx

from kiln import Client
from kiln.stores import store_from_url
from tests.support.web import MakeHttp


async def test_paging_keeps_the_time_range_it_started_with(
        http: httpx.AsyncClient, client: Client) -> None:
    for i in range(3):
        await client.enqueue("k", {"i": i}, queue="tr")
    api = (await http.get("/api/jobs?queue=tr&since=1h&limit=1")).json()
    assert api["next"] is not None
    since = parse_qs(api["next"])["since"][0]
    assert since != "1h" and since.endswith("+00:00")  # the time "1h" meant
    older = (await http.get(f"/api/jobs?{api['next']}")).json()
    assert len(older["jobs"]) == 1 and parse_qs(older["next"])["since"] == [since]
    page = await http.get("/jobs?queue=tr&since=1h&limit=1")
    assert 'rel="next"' in page.text and "since=1h" not in page.text.split('rel="next"')[0][-300:]


async def test_a_range_that_ends_before_it_starts_is_refused(http: httpx.AsyncClient) -> None:
    for path in ("/jobs?since=1h&until=2h", "/api/jobs?since=2026-01-02&until=2026-01-01"):
        response = await http.get(path)
        assert response.status_code == 400
        assert "is not before until" in response.text
    assert (await http.get("/jobs?since=2h&until=1h")).status_code == 200


async def test_a_503_names_no_database_address(make_http: MakeHttp) -> None:
    """N13: the 503 page showed the driver's message, with the database's address."""
    store = store_from_url("postgresql://kiln_user@127.0.0.1:1/secret_db", connect_timeout=1.0)
    http = make_http(Client(store))
    for path in ("/jobs", "/api/jobs"):
        response = await http.get(path)
        assert response.status_code == 503, path
        said = html.unescape(response.text)
        assert "could not be reached" in said
        assert not any(s in said for s in ("127.0.0.1:1", "secret_db", "kiln_user", "port 1"))
