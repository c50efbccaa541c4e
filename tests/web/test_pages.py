"""Every page renders on every store, shows what it should, and escapes what jobs carry."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx

from kiln import Client, filter_of
from kiln._model._job import RateLimit
from tests.support.web import MakeHttp, fail_jobs

SCRIPT = "<script>alert('kiln')</script>"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_every_page_answers(http: httpx.AsyncClient, client: Client) -> None:
    await fail_jobs(client, 2)
    await client.enqueue("report.build", {}, queue="reports")
    for path in ("/", "/jobs", "/jobs?state=failed", "/jobs?state=available&queue=reports",
                 "/queues", "/servers", "/recurring", "/rate-limits", "/audit",
                 "/jobs/requeue-all?state=failed", "/static/kiln.css", "/static/kiln.js"):
        response = await http.get(path)
        assert response.status_code == 200, (path, response.text[:500])


async def test_overview_counts_jobs_by_state_and_queue(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    await fail_jobs(client, 3, queue="mail")
    for _ in range(2):
        await client.enqueue("report.build", {}, queue="reports")
    page = (await http.get("/")).text
    assert 'href="/jobs?state=failed"' in page
    assert '<span class="n">3</span><span class="state state-failed">' in page
    assert '<span class="n">2</span><span class="state state-available">' in page
    assert "/jobs?state=available&amp;queue=reports" in page
    assert "3 failed" in page  # the health check
    assert "no server alive" in page


async def test_failed_tab_lists_failed_jobs_newest_first_with_errors(
    http: httpx.AsyncClient, client: Client
) -> None:
    failed = await fail_jobs(client, 3, error="SMTP timeout")
    other = await client.enqueue("email.send", {}, queue="mail")
    page = (await http.get("/jobs?state=failed")).text
    shown = [int(x) for x in _ids(page)]
    assert shown == sorted(failed, reverse=True)
    assert other not in shown
    assert "SMTP timeout" in page
    assert 'class="tab-failed current"' in page
    assert 'id="requeue-all"' in page


async def test_filters_by_queue_kind_and_error_text(http: httpx.AsyncClient,
                                                   client: Client) -> None:
    smtp = await fail_jobs(client, 2, kind="email.send", queue="mail", error="SMTP timeout")
    dns = await fail_jobs(client, 2, kind="email.send", queue="mail", error="DNS failure")
    other = await fail_jobs(client, 1, kind="sms.send", queue="sms", error="SMTP timeout")
    assert _ids_of(await http.get("/jobs?state=failed&error=smtp")) == sorted(
        smtp + other, reverse=True)
    assert _ids_of(await http.get("/jobs?state=failed&queue=mail&error=DNS")) == sorted(
        dns, reverse=True)
    assert _ids_of(await http.get("/jobs?state=failed&kind=sms.send")) == other
    assert _ids_of(await http.get("/jobs?state=failed&kind=nothing")) == []


async def test_keyset_pages_cover_every_job_once(http: httpx.AsyncClient,
                                                 client: Client) -> None:
    ids = [await client.enqueue("k", {"i": i}, queue="q") for i in range(7)]
    seen: list[int] = []
    url = "/jobs?limit=3"
    for _ in range(5):
        response = await http.get(url)
        assert response.status_code == 200
        seen += _ids_of(response)
        older = re.search(r'<a href="([^"]+)" rel="next">', response.text)
        if older is None:
            break
        url = html.unescape(older.group(1))
    assert seen == sorted(ids, reverse=True)


async def test_job_page_shows_everything(http: httpx.AsyncClient, client: Client) -> None:
    [parent] = await fail_jobs(client, 1, args={"to": "a@example.com"}, error="Kaboom",
                               metadata={"otel": {"traceparent": TRACEPARENT}})
    child = await client.enqueue("report.build", {"of": parent}, queue="reports",
                                 depends_on=[parent])
    page = (await http.get(f"/jobs/{parent}")).text
    assert "a@example.com" in page
    assert "0af7651916cd43dd8448eb211c80319c" in page  # the trace id
    assert "Traceback (most recent call last)" in page and "Kaboom" in page
    assert "web-test-server" in page
    assert f'href="/jobs/{child}"' in page  # what waits on it
    assert f'action="/jobs/{parent}/requeue"' in page
    assert f'action="/jobs/{parent}/cancel"' not in page  # failed jobs cannot be cancelled
    child_page = (await http.get(f"/jobs/{child}")).text
    assert f'href="/jobs/{parent}"' in child_page  # what it waits on
    assert "state-awaiting" in child_page


async def test_job_params_are_shown(http: httpx.AsyncClient, client: Client) -> None:
    job_id = await client.enqueue("k", {}, queue="q")
    [row] = await client._store.job_claim("q", ["k"], 1, "srv")
    assert await client._store.job_param_set(job_id, "srv", row.attempt, "cursor", 1234)
    page = (await http.get(f"/jobs/{job_id}")).text
    assert "&#34;cursor&#34;: 1234" in page
    assert "state-running" in page


async def test_script_in_anything_a_job_carries_is_escaped(
    http: httpx.AsyncClient, client: Client
) -> None:
    queue, kind = f"q{SCRIPT}"[:200], f"k{SCRIPT}"
    [job_id] = await fail_jobs(client, 1, kind=kind, queue=queue, error=SCRIPT,
                               args={"html": SCRIPT}, metadata={"note": SCRIPT})
    await client._store.rate_limit_declare(f"r{SCRIPT}", RateLimit(rate=1))
    pages = [f"/jobs/{job_id}", "/jobs?state=failed", "/", "/queues", "/rate-limits",
             f"/jobs?state=failed&error={SCRIPT}", f"/jobs?kind={SCRIPT}",
             f"/jobs/requeue-all?state=failed&error={SCRIPT}"]
    await client.requeue(filter_of(ids=[job_id]), actor=f"a{SCRIPT}")
    pages.append("/audit")
    for path in pages:
        response = await http.get(path)
        assert response.status_code == 200, path
        assert "<script>alert" not in response.text, path
        assert "&lt;script&gt;alert" in response.text, path


async def test_bad_parameters_get_400_with_a_message(http: httpx.AsyncClient,
                                                    client: Client) -> None:
    await client.enqueue("k", {}, queue="q")
    cases = {
        "/jobs?state=bogus": "unknown state",
        "/jobs?limit=abc": "limit must be a whole number",
        "/jobs?limit=0": "limit must be between 1 and 500",
        "/jobs?limit=100000": "limit must be between 1 and 500",
        "/jobs?before=-1": "before must be between 1",
        "/jobs?before=1e3": "before must be a whole number",
        "/jobs?before=99999999999999999999999": "before must be",
        "/jobs/abc": "job id must be a whole number",
        "/jobs/0": "job id must be between 1",
        "/jobs/99999999999999999999": "job id must be",
        "/jobs?queue=" + "x" * 201: "queue is 201 characters long",
        "/jobs?error=a%00b": "must not contain NUL",
        "/jobs/requeue-all?state=completed": "requeue all works on the Failed tab",
        "/audit?limit=-5": "limit must be between 1",
    }
    for path, message in cases.items():
        response = await http.get(path)
        assert response.status_code == 400, (path, response.status_code)
        assert message in html.unescape(response.text), (path, response.text[-600:])


async def test_missing_job_is_404(http: httpx.AsyncClient) -> None:
    response = await http.get("/jobs/424242")
    assert response.status_code == 404
    assert "There is no job 424242" in response.text


async def test_security_headers(http: httpx.AsyncClient) -> None:
    response = await http.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_recurring_page_needs_an_app(http: httpx.AsyncClient) -> None:
    assert "started with a database URL only" in (await http.get("/recurring")).text


def _ids(page: str) -> list[str]:
    return re.findall(r'name="ids" value="(\d+)"', page)


def _ids_of(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text[-500:]
    return [int(x) for x in _ids(response.text)]


async def test_a_database_that_does_not_answer_gets_503(make_http: MakeHttp,
                                                        tmp_path: Path) -> None:
    http = make_http(f"sqlite:///{tmp_path / 'missing' / 'kiln.db'}")
    for path in ("/", "/jobs?state=failed", "/jobs/1"):
        response = await http.get(path)
        assert response.status_code == 503, path
        assert "run `kiln migrate`" in html.unescape(response.text)
