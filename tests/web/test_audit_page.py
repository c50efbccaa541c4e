"""Issue 44: the audit page filters by action, actor (contains) and time, and pages
(older entries than the last shown), its relative times pinned in the page links."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import httpx

from kiln import Client


def _entries(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-entry="(\d+)"', page)]


def _link(page: str, rel_text: str) -> str:
    match = re.search(r'<a href="([^"]+)"[^>]*>' + re.escape(rel_text), page)
    assert match, f"no {rel_text} link"
    return html.unescape(match.group(1))


async def test_audit_filters_and_pages(http: httpx.AsyncClient, client: Client) -> None:
    for i in range(3):
        await client.record_audit(f"dashboard:alice@10.0.0.{i}", "requeue", i, {})
        await client.record_audit("cli:bob", "delete", i, {})
    await client.record_audit("dashboard:carol@127.0.0.1", "login", 0, {})
    everything = await client.audit(100)
    ids = [e.id for e in everything]

    page = (await http.get("/audit")).text
    assert _entries(page) == ids and 'list="audit-actions"' in page
    by_action = (await http.get("/audit", params={"action": "delete"})).text
    assert _entries(by_action) == [e.id for e in everything if e.action == "delete"]
    assert 'name="action" value="delete"' in by_action and ">Clear</a>" in by_action
    by_actor = (await http.get("/audit", params={"actor": "alice"})).text
    assert _entries(by_actor) == [e.id for e in everything if "alice" in e.actor]
    both = await http.get("/audit", params={"actor": "alice", "action": "delete"})
    assert _entries(both.text) == [] and "No entry matches" in both.text

    # time: entries written at or after since, before until (an age or an ISO time)
    newest = everything[0]
    since = (await http.get("/audit", params={"since": newest.at.isoformat()})).text
    assert _entries(since) == [newest.id]
    until = (await http.get("/audit", params={"until": newest.at.isoformat()})).text
    assert newest.id not in _entries(until) and _entries(until)
    assert _entries((await http.get("/audit", params={"since": "1h"})).text) == ids
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert _entries((await http.get("/audit", params={"since": future})).text) == []

    # pages of 3: older, older, then none; the filter and a pinned time carried along
    first = (await http.get("/audit", params={"limit": "3", "since": "1h"})).text
    assert _entries(first) == ids[:3] and "Newest</a>" not in first
    older = _link(first, "Older")
    assert "since=1h" not in older and "since=20" in older and "limit=3" in older
    second = (await http.get(older)).text
    assert _entries(second) == ids[3:6] and "Newest</a>" in second
    third = (await http.get(_link(second, "Older"))).text
    assert _entries(third) == ids[6:] and "Older" not in third


async def test_bad_audit_parameters_are_400(http: httpx.AsyncClient) -> None:
    for params in ({"before": "abc"}, {"since": "yesterday"}, {"limit": "0"},
                   {"since": "1h", "until": "2h"}, {"actor": "x" * 201}):
        response = await http.get("/audit", params=params)
        assert response.status_code == 400, params
