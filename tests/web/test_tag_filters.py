"""The dashboard's tag, metadata and args filters: the listing, the links and forms that
carry them, and "requeue all failed jobs of tenant 42", bound to what its confirmation
showed (max_id, finished_before) like every filtered bulk action."""

from __future__ import annotations

import html
import re

import httpx

from kiln import Client
from kiln._model._job import JobFilter, JobState
from tests.support.web import HIDDEN, csrf_of, fail_jobs

ID_CELL = re.compile(r'name="ids" value="(\d+)"')


def listed(page: str) -> list[int]:
    return [int(i) for i in ID_CELL.findall(page)]


def hidden_pairs(page: str) -> list[tuple[str, str]]:
    """Every hidden field, repeated names kept (tags, metadata and args filters)."""
    return [(name, html.unescape(value)) for name, value in HIDDEN.findall(page)]


async def test_listing_filters_by_tags_metadata_and_args(http: httpx.AsyncClient,
                                                         client: Client) -> None:
    a = await client.enqueue("k", {"user": "ann"}, tags=["billing", "eu"],
                             metadata={"tenant": 42})
    b = await client.enqueue("k", {"user": "bob"}, tags=["billing"], metadata={"tenant": "42"})
    c = await client.enqueue("k", {"user": "cy"}, metadata={"tenant": 42, "vip": True})
    for query, ids in (
        ("tag=billing", [b, a]), ("tag=billing&tag=eu", [a]), ("tag=billing&tag=", [b, a]),
        ("meta=tenant%3D42", [c, a]), ("meta=tenant%3D%2242%22", [b]),
        ("meta=tenant%3D42&meta=vip%3Dtrue", [c]), ("arg=user%3Dbob", [b]),
        ("tag=billing&arg=user%3Dcy", []),
    ):
        page = await http.get(f"/jobs?{query}")
        assert page.status_code == 200, (query, page.text)
        assert listed(page.text) == ids, query
    page = await http.get("/jobs?tag=billing&meta=tenant%3D%2242%22&arg=user%3Dbob")
    fields = hidden_pairs(page.text)
    assert ("tag", "billing") in fields and ("meta", 'tenant="42"') in fields
    assert ("arg", "user=bob") in fields
    assert 'value="tenant=&#34;42&#34;"' in page.text or "tenant=&quot;42&quot;" in page.text
    job_page = await http.get(f"/jobs/{a}")
    assert 'href="/jobs?tag=billing"' in job_page.text and ">eu</a>" in job_page.text


async def test_bad_filters_are_a_400_that_names_them(http: httpx.AsyncClient,
                                                     client: Client) -> None:
    for query, words in (
        ("tag=" + "x" * 101, "limit is 100"),
        ("&".join(f"tag=t{i}" for i in range(21)), "21 tags"),
        ("meta=tenant", "key=value"),
        ("meta=%3D1", "key=value"),
        ("arg=a%22b%3D1", "quote or a backslash"),
        ("tag=a%1Bb", "U+001B"),
    ):
        page = await http.get(f"/jobs?{query}")
        assert page.status_code == 400, query
        assert words in html.unescape(page.text), (query, words)
        confirm = await http.get(f"/jobs/requeue-all?state=failed&{query}")
        assert confirm.status_code == 400, query


async def test_requeue_all_failed_jobs_of_tenant_42(http: httpx.AsyncClient,
                                                   client: Client) -> None:
    ours = await fail_jobs(client, 3, metadata={"tenant": 42}, tags=["billing"])
    theirs = await fail_jobs(client, 2, metadata={"tenant": 7}, tags=["billing"])
    confirm = await http.get("/jobs/requeue-all?state=failed&tag=billing&meta=tenant%3D42")
    assert confirm.status_code == 200, confirm.text
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    said = html.unescape(confirm.text)
    assert "tagged billing" in re.sub(r"<[^>]+>", "", said)
    assert "with metadata tenant=42" in re.sub(r"<[^>]+>", "", said)
    later = await fail_jobs(client, 1, metadata={"tenant": 42})  # after the page: left alone
    form = hidden_pairs(confirm.text)
    assert ("meta", "tenant=42") in form and ("tag", "billing") in form
    response = await http.post("/jobs/requeue-all", data=_multi(form))
    assert response.status_code == 303, response.text
    assert response.headers["location"].endswith("done=requeue&n=3")
    assert "meta=tenant%3D42" in response.headers["location"]
    states = {i: (await client.get(i)).state for i in ours + theirs + later}  # type: ignore[union-attr]
    assert [states[i] for i in ours] == [JobState.AVAILABLE] * 3
    assert [states[i] for i in theirs + later] == [JobState.FAILED] * 3
    [entry] = await client._store.audit_list(10)
    assert entry.detail["metadata"] == {"tenant": 42} and entry.detail["tags"] == ["billing"]
    assert entry.detail["max_id"] == max(ours) and "finished_before" in entry.detail
    listing = await http.get("/jobs?state=failed&meta=tenant%3D42")
    assert csrf_of(listing.text) and listed(listing.text) == later


def _multi(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    return form


async def test_cancel_all_and_delete_all_take_the_filters_within_their_bound(
    http: httpx.AsyncClient, client: Client
) -> None:
    ours = [await client.enqueue("k", {"i": i}, metadata={"tenant": 42}, tags=["t"])
            for i in range(3)]
    theirs = await client.enqueue("k", {}, metadata={"tenant": 7}, tags=["t"])
    listing = await http.get("/jobs?state=available&meta=tenant%3D42")
    assert 'id="cancel-all"' in listing.text and 'id="delete-all"' in listing.text
    assert "meta=tenant%3D42" in listing.text.split('id="cancel-all"')[1].split(">")[0]
    confirm = await http.get("/jobs/all/cancel?state=available&tag=t&meta=tenant%3D42")
    assert confirm.status_code == 200, confirm.text
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    later = await client.enqueue("k", {}, metadata={"tenant": 42}, tags=["t"])
    response = await http.post("/jobs/all/cancel", data=_multi(hidden_pairs(confirm.text)))
    assert response.status_code == 303, response.text
    assert response.headers["location"].endswith("done=cancel&n=3")
    state = {i: (await client.get(i)).state for i in [*ours, theirs, later]}  # type: ignore[union-attr]
    assert [state[i] for i in ours] == [JobState.CANCELLED] * 3
    assert state[theirs] is JobState.AVAILABLE and state[later] is JobState.AVAILABLE

    confirm = await http.get("/jobs/all/delete?state=cancelled&meta=tenant%3D42")
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    response = await http.post("/jobs/all/delete", data=_multi(hidden_pairs(confirm.text)))
    assert response.headers["location"].endswith("done=delete&n=3")
    assert [await client.get(i) for i in ours] == [None] * 3
    assert await client.count(JobFilter()) == 2
    entries = await client._store.audit_list(10)
    assert [(e.action, e.count, e.detail.get("metadata")) for e in entries] == [
        ("delete", 3, {"tenant": 42}), ("cancel", 3, {"tenant": 42})]


async def test_an_all_matching_action_without_its_bound_writes_nothing(
    http: httpx.AsyncClient, client: Client
) -> None:
    await client.enqueue("k", {}, tags=["t"])
    confirm = await http.get("/jobs/all/delete?state=available&tag=t")
    fields = dict(hidden_pairs(confirm.text))
    assert fields["tag"] == "t"
    del fields["max_id"]
    response = await http.post("/jobs/all/delete", data=fields)
    assert response.status_code == 400 and "max_id" in response.text
    assert await client.count(JobFilter()) == 1
