"""Issue 44, "who is affected": the Failed tab groups failed jobs by their last error
(class and message) with counts, each group a filter that matches exactly its jobs
(not every message that contains it) and a bound bulk action; job lists show args
and metadata, cut short. Checked against the jobs this test failed, on every store."""

from __future__ import annotations

import html
import re
from urllib.parse import unquote_plus

import httpx

import kiln
from kiln import Client
from kiln._model._job import JobFilter, JobState
from tests.support.web import fail_jobs, hidden_fields

SMTP = "ConnectionError: smtp timeout"
GROUP = re.compile(
    r'<tr class="error-group">\s*<td class="num">([0-9,]+)</td>\s*<td class="err">(.*?)</td>'
    r'.*?class="group-filter" href="/jobs\?([^"]+)"', re.S)


def groups(page: str) -> list[tuple[int, str, str]]:
    """(jobs, error as shown, the group's query) of each group on a Failed tab."""
    return [(int(n.replace(",", "")), html.unescape(re.sub(r"<[^>]+>", "", err)),
             html.unescape(query)) for n, err, query in GROUP.findall(page)]


async def test_failed_jobs_grouped_by_error_each_group_a_filter(
    http: httpx.AsyncClient, client: Client
) -> None:
    smtp = await fail_jobs(client, 3, error=SMTP, args={"customer": "c-17"},
                           metadata={"tenant": "acme"})
    bad = await fail_jobs(client, 2, error="ValueError: bad address")
    longer = await fail_jobs(client, 1, error=SMTP + " after 30 s")  # contains SMTP
    await fail_jobs(client, 1, queue="reports", kind="report.build", error="KeyError: 'x'")

    page = (await http.get("/jobs?state=failed&queue=mail")).text
    shown = groups(page)
    assert [(n, err) for n, err, _q in shown] == [
        (3, SMTP), (2, "ValueError: bad address"), (1, SMTP + " after 30 s")]
    assert '<strong class="error-class">ConnectionError</strong>' in page
    assert "of the newest 10,000 failed jobs that match the filter" in page
    # the list shows who is affected: args and metadata, on one line
    assert re.search(r'<code class="args" title="[^"]*">'
                     r'{&#34;customer&#34;:&#34;c-17&#34;}</code>', page)
    assert re.search(r'<code class="meta" title="[^"]*">{&#34;tenant&#34;:&#34;acme&#34;}</code>',
                     page)

    # a group's filter lists exactly its jobs: not the one whose message only contains it
    query = shown[0][2]
    assert "error_is=" in query and "queue=mail" in query
    listing = (await http.get("/jobs?" + query)).text
    listed = {int(i) for i in re.findall(r'name="ids" value="(\d+)"', listing)}
    assert listed == set(smtp)
    assert 'id="error-group"' in listing and 'class="error-group"' not in listing
    assert unquote_plus(query.split("error_is=")[1].split("&")[0]) == SMTP
    # the API has the same groups, each with the query of its jobs
    api = (await http.get("/api/errors?queue=mail")).json()
    assert [(g["jobs"], g["error"], g["error_class"]) for g in api["groups"]] == [
        (3, SMTP, "ConnectionError"), (2, "ValueError: bad address", "ValueError"),
        (1, SMTP + " after 30 s", "ConnectionError")]
    listed_api = (await http.get("/api/jobs?" + api["groups"][0]["jobs_query"])).json()
    assert {j["id"] for j in listed_api["jobs"]} == set(smtp)
    # the client's filter agrees
    assert {j.id for j in await client.list(JobFilter(last_error=SMTP), 50)} == set(smtp)
    assert {j.id for j in await client.list(kiln.filter_of(last_error=SMTP), 50)} == set(smtp)
    assert {j.id for j in await client.list(JobFilter(last_error=SMTP[:-1]), 50)} == set()

    # the group's requeue: bound to the jobs its confirmation counted
    confirm = await http.get("/jobs/requeue-all?" + query)
    assert confirm.status_code == 200, confirm.text
    assert re.search(r'id="confirm-count">3<', confirm.text)
    assert "whose last error is exactly" in confirm.text
    fields = hidden_fields(confirm.text)
    assert fields["error_is"] == SMTP
    later = await fail_jobs(client, 1, error=SMTP)  # fails after the page was shown
    done = await http.post("/jobs/requeue-all", data=fields)
    assert done.status_code == 303 and "done=requeue&n=3" in done.headers["location"]
    states = {i: (await client.get(i)).state for i in [*smtp, *bad, *longer, *later]}  # type: ignore[union-attr]
    assert [states[i] for i in smtp] == [JobState.AVAILABLE] * 3
    assert {states[i] for i in [*bad, *longer, *later]} == {JobState.FAILED}

    # and the group's delete, through the "all matching" confirmation
    confirm = await http.get("/jobs/all/delete?state=failed&error_is=ValueError%3A+bad+address")
    assert re.search(r'id="confirm-count">2<', confirm.text)
    done = await http.post("/jobs/all/delete", data=hidden_fields(confirm.text))
    assert "done=delete&n=2" in done.headers["location"]
    assert [await client.get(i) for i in bad] == [None, None]
    assert (await client.get(longer[0])) is not None


async def test_no_groups_outside_the_failed_tab(http: httpx.AsyncClient,
                                                client: Client) -> None:
    await fail_jobs(client, 1, error=SMTP)
    assert 'id="error-groups"' not in (await http.get("/jobs")).text
    assert 'id="error-groups"' in (await http.get("/jobs?state=failed")).text
    too_long = await http.get("/jobs?state=failed&error_is=" + "x" * 5000)
    assert too_long.status_code == 400
