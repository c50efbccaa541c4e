"""What an operator reads beside the job lists: charts of the last hour, jobs by kind,
what each server runs now, a job's timeline, jump to a job by id, and the JSON API
under /api/ with the same data, auth and parameter checks as the pages."""

from __future__ import annotations

import re
from collections.abc import Sequence

import httpx

from kiln import Client
from kiln._model._job import AttemptError, JobResult, Outcome
from kiln._model._kinds import make_kind
from tests.stores.factories import server
from tests.support.web import TOKEN, MakeHttp, fail_jobs


async def complete_jobs(
    client: Client, n: int, kind: str = "report.build"
) -> Sequence[int]:
    ids = [await client.enqueue(kind, {"i": i}, queue="reports") for i in range(n)]
    rows = await client._store.job_claim("reports", [kind], n, "web-test-server")
    await client._store.job_results_apply(
        [JobResult(job_id=r.id, server_id="web-test-server", attempt=r.attempt,
                   outcome=Outcome.COMPLETED) for r in rows]
    )
    return ids


def chart_values(page: str, key: str) -> list[int]:
    figure = page.split(f'id="chart-{key}"', 1)[1]
    raw = re.search(r'data-values="([0-9,]*)"', figure)
    assert raw is not None
    return [int(v) for v in raw.group(1).split(",") if v]


async def test_charts_show_the_jobs_that_finished(http: httpx.AsyncClient,
                                                 client: Client) -> None:
    await complete_jobs(client, 4)
    await fail_jobs(client, 3)
    page = (await http.get("/")).text
    completed, failed = chart_values(page, "completed"), chart_values(page, "failed")
    assert len(completed) == 60 and sum(completed) == 4 and completed[-1] == 4
    assert sum(failed) == 3 and sum(chart_values(page, "cancelled")) == 0
    assert "4 in the hour" in page and "3 in the hour" in page
    assert chart_values(page, "backlog") == [0]  # sampled when the counts were read
    series = (await http.get("/api/series")).json()
    assert sum(series["finished"]["completed"]) == 4
    assert sum(series["finished"]["failed"]) == 3
    assert series["bucket_seconds"] == 60 and series["backlog"][0]["available"] == 0


async def test_kinds_page_counts_by_kind_with_declarations(http: httpx.AsyncClient,
                                                          client: Client) -> None:
    await complete_jobs(client, 2)
    await fail_jobs(client, 1)
    await client.enqueue("never.declared", {}, queue="misc")
    await client._store.server_register(server("mailer"))
    mail = make_kind("email.send", lambda job: None, queue="mail", max_attempts=7)
    await client._store.kinds_publish("mailer", "host", 1, [mail.declaration()])
    page = (await http.get("/kinds")).text
    assert 'href="/jobs?kind=email.send"' in page
    assert 'href="/jobs?state=completed&amp;kind=report.build">2</a>' in page
    assert "1 live server" in page and "not declared" in page
    kinds = {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}
    assert kinds["email.send"]["states"]["failed"] == 1
    assert kinds["email.send"]["declaration"]["max_attempts"] == 7
    assert kinds["email.send"]["servers"] == ["mailer"] and not kinds["email.send"]["conflict"]
    assert kinds["never.declared"]["declaration"] is None


async def test_servers_page_shows_what_each_server_runs(http: httpx.AsyncClient,
                                                       client: Client) -> None:
    for name in ("alpha", "beta"):
        await client._store.server_register(server(name, {"q": 2}))
    await client._store.server_heartbeat("alpha", 5)  # its process's connections
    ids = [await client.enqueue("k", {"i": i}, queue="q") for i in range(3)]
    await client._store.job_claim("q", ["k"], 2, "alpha")
    await client._store.job_claim("q", ["k"], 1, "beta")
    page = (await http.get("/servers")).text
    assert "Running now" in page and "(3)" in page
    alpha = page.split("<code>alpha</code> <small>", 1)[1]
    assert alpha.startswith("2 running")
    assert all(f'href="/jobs/{i}"' in page for i in ids)
    data = (await http.get("/api/servers")).json()
    running = {s["id"]: sorted(j["id"] for j in s["running"]) for s in data["servers"]}
    assert running == {"alpha": sorted(ids[:2]), "beta": [ids[2]]}
    assert all(s["alive"] for s in data["servers"])
    assert {s["id"]: s["connections"] for s in data["servers"]} == {"alpha": 5, "beta": None}
    assert '<td class="num">5</td>' in page.split("<code>beta</code>")[0]  # alpha's row


async def test_job_timeline_shows_each_attempt_with_its_wait_and_run_time(
    http: httpx.AsyncClient, client: Client
) -> None:
    job_id = await client.enqueue("k", {}, queue="q", max_attempts=3)
    [row] = await client._store.job_claim("q", ["k"], 1, "s1")
    started = row.attempted_at.timestamp()  # type: ignore[union-attr]
    error = AttemptError(1, started + 0.25, "ValueError: no", "", "s1",
                         due_at=row.run_at.timestamp(), started_at=started)
    await client._store.job_results_apply([JobResult(job_id, "s1", 1, Outcome.RETRY,
                                                    run_at_delay=600, error=error)])
    page = (await http.get(f"/jobs/{job_id}")).text
    assert "Timeline" in page and "attempt 1" in page and "ran 250ms" in page
    assert "ValueError: no" in page and "attempt 2 due" in page and "in 10m" in page
    steps = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert [s["event"] for s in steps] == ["enqueued", "attempt", "next"]
    assert abs(steps[1]["ran"] - 0.25) < 1e-6 and steps[1]["error"] == "ValueError: no"
    assert 590 < steps[2]["due_in"] <= 600 and steps[2]["attempt"] == 2
    assert await client._store.job_claim("q", ["k"], 1, "s1") == []  # not due yet


async def test_a_completed_job_timeline_ends_with_its_last_attempt(
    http: httpx.AsyncClient, client: Client
) -> None:
    [job_id] = await complete_jobs(client, 1)
    steps = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert [s["event"] for s in steps] == ["enqueued", "attempt", "completed"]
    assert steps[1]["attempt"] == 1 and steps[1]["ran"] >= 0 and steps[1]["waited"] >= 0


async def test_jump_to_a_job_by_id(http: httpx.AsyncClient, client: Client) -> None:
    job_id = await client.enqueue("k", {}, queue="q")
    page = (await http.get("/")).text
    assert 'action="/jobs/goto"' in page
    response = await http.get(f"/jobs/goto?id=%23{job_id}")
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/{job_id}"
    assert (await http.get("/jobs/goto?id=")).headers["location"] == "/jobs"
    bad = await http.get("/jobs/goto?id=12abc")
    assert bad.status_code == 400 and "job id" in bad.text


async def test_api_lists_and_pages_jobs_like_the_pages(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    ids = await fail_jobs(client, 5)
    first = (await http.get("/api/jobs?state=failed&limit=3")).json()
    assert [j["id"] for j in first["jobs"]] == sorted(ids, reverse=True)[:3]
    assert first["jobs"][0]["errors"][0]["error"] == "SMTP timeout"
    rest = (await http.get(f"/api/jobs?{first['next']}")).json()
    assert [j["id"] for j in rest["jobs"]] == sorted(ids, reverse=True)[3:]
    assert rest["next"] is None
    overview = (await http.get("/api/overview")).json()
    assert overview["states"]["failed"] == 5 and overview["queues"]["mail"]["failed"] == 5
    assert {c["name"] for c in overview["checks"]} >= {"database", "failed jobs"}
    queues = {q["name"]: q for q in (await http.get("/api/queues")).json()["queues"]}
    assert queues["mail"]["states"]["failed"] == 5
    assert "/api/jobs" in (await http.get("/api/")).json()["endpoints"]


async def test_api_errors_are_json_with_the_security_headers(http: httpx.AsyncClient) -> None:
    for path, status, words in [("/api/jobs?limit=--5", 400, "limit"),
                                ("/api/jobs?state=bogus", 400, "state"),
                                ("/api/jobs/--1", 400, "job id"),
                                ("/api/jobs/424242", 404, "no job 424242"),
                                ("/api/nothing-here", 404, "no such endpoint")]:
        response = await http.get(path)
        assert response.status_code == status, path
        assert words in response.json()["error"]["message"], (path, response.text)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-type"].startswith("application/json")


async def test_api_needs_the_same_credentials(make_http: MakeHttp, client: Client) -> None:
    http = make_http(token=TOKEN)
    assert (await http.get("/api/overview")).status_code == 401
    ok = await http.get("/api/overview", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json()["states"]["available"] == 0
    refused = await http.get("/api/overview", headers={"Host": "rebind.example"})
    assert refused.status_code in (400, 403, 421)


async def test_time_range_and_order_filters(http: httpx.AsyncClient, client: Client) -> None:
    ids = [await client.enqueue("k", {"i": i}, queue="q") for i in range(4)]
    newest = re.findall(r'name="ids" value="(\d+)"', (await http.get("/jobs?since=1h")).text)
    assert [int(i) for i in newest] == sorted(ids, reverse=True)
    assert 'name="ids"' not in (await http.get("/jobs?until=1h")).text  # all are younger
    oldest = (await http.get("/jobs?order=oldest&limit=2")).text
    assert [int(i) for i in re.findall(r'name="ids" value="(\d+)"', oldest)] == sorted(ids)[:2]
    assert f"order=oldest&amp;after={sorted(ids)[1]}" in oldest and "Newer »" in oldest
    page = (await http.get(f"/api/jobs?order=oldest&limit=2&after={sorted(ids)[1]}")).json()
    assert [j["id"] for j in page["jobs"]] == sorted(ids)[2:]
    for bad, words in [("since=yesterday", "since must be an age"), ("order=random", "order"),
                       ("since=99999d", "ten years"), ("before=3&after=1", "not both")]:
        response = await http.get(f"/jobs?{bad}")
        assert response.status_code == 400 and words in response.text, bad


async def test_a_confirmation_pins_a_relative_time_range(http: httpx.AsyncClient,
                                                        client: Client) -> None:
    await fail_jobs(client, 2)
    confirm = await http.get("/jobs/all/delete?state=failed&since=1h")
    assert '<strong id="confirm-count">2</strong>' in confirm.text
    since = re.search(r'name="since" value="([^"]+)"', confirm.text)
    assert since is not None and since.group(1).startswith("20")  # an absolute time now
    requeue = await http.get("/jobs/requeue-all?state=failed&since=1h")
    assert re.search(r'name="since" value="20', requeue.text)
    assert "enqueued since <code>20" in requeue.text
