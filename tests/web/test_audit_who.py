"""Read-only mode and the audit of who did what from where (issue 21, defect 12): no
action buttons on any page in read-only mode; every action, sign-in, sign-out and
refusal recorded with the token's name or the user, and the client's address as the
trusted proxy reports it."""

from __future__ import annotations

import re

import httpx

from kiln import Client
from kiln.web import create_app
from tests.support.web import BASE_URL, TOKEN, csrf_of, fail_jobs

CI_TOKEN = "ci-token-0123456789abcdefXYZ"
PAGES = ("/", "/jobs", "/jobs?state=failed", "/queues", "/servers", "/recurring",
         "/rate-limits", "/audit", "/jobs/requeue-all?state=failed")


def _http(app: object, address: str = "10.1.2.3") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


async def test_read_only_pages_show_no_action_at_all(client: Client) -> None:
    job_id, _ = await fail_jobs(client, 2)
    app = create_app(client, token=TOKEN, read_only=True)
    async with _http(app) as http:
        page = await http.get("/login")
        await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)})
        for path in (*PAGES, f"/jobs/{job_id}"):
            response = await http.get(path)
            assert response.status_code == 200, path
            posts = re.findall(r'<form method="post" action="([^"]+)"', response.text)
            assert posts == ["/logout"], (path, posts)  # signing out is all there is
            for marker in ('id="confirm-requeue"', 'id="requeue-all"', 'name="ids"',
                           'value="requeue"', 'value="delete"'):
                assert marker not in response.text, (path, marker)
        assert "read-only" in (await http.get("/jobs/requeue-all?state=failed")).text


async def test_the_audit_says_who_and_from_where(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    app = create_app(client, tokens={"alice": TOKEN, "ci": CI_TOKEN},
                     trusted_proxies=["10.0.0.0/8"])
    alice_at = {"X-Forwarded-For": "198.51.100.20"}
    async with _http(app) as http:
        page = await http.get("/login", headers=alice_at)
        wrong = await http.post("/login", headers=alice_at,
                                data={"token": "not-a-token-at-all-00",
                                      "csrf": csrf_of(page.text)})
        assert wrong.status_code == 401
        await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)},
                        headers=alice_at)
        job_page = await http.get(f"/jobs/{job_id}", headers=alice_at)
        assert "alice" in job_page.text
        await http.post(f"/jobs/{job_id}/requeue", headers=alice_at,
                        data={"csrf": csrf_of(job_page.text)})
        forged = await http.post(f"/jobs/{job_id}/delete", headers=alice_at,
                                 data={"csrf": "0" * 64})
        assert forged.status_code == 403
        await http.post("/logout", headers=alice_at, data={"csrf": csrf_of(job_page.text)})
    async with _http(app, "203.0.113.50") as script:  # no proxy in between: its own address
        bearer = {"Authorization": f"Bearer {CI_TOKEN}", "X-Forwarded-For": "1.2.3.4"}
        page = await script.get(f"/jobs/{job_id}", headers=bearer)
        response = await script.post(f"/jobs/{job_id}/cancel", headers=bearer,
                                     data={"csrf": csrf_of(page.text)})
        assert response.status_code == 303
    entries = [(e.actor, e.action, e.count) for e in await client._store.audit_list(20)][::-1]
    assert entries == [
        ("dashboard:anonymous@198.51.100.20", "login-failed", 0),
        ("dashboard:alice@198.51.100.20", "login", 0),
        ("dashboard:alice@198.51.100.20", "requeue", 1),
        ("dashboard:alice@198.51.100.20", "refused", 0),
        ("dashboard:alice@198.51.100.20", "logout", 0),
        ("dashboard:ci@203.0.113.50", "cancel", 1),
    ]
    async with _http(app) as http:
        shown = await http.get("/audit", headers={"Authorization": f"Bearer {CI_TOKEN}"})
    assert "dashboard:alice@198.51.100.20" in shown.text and "login-failed" in shown.text
    assert "CSRF token missing or invalid" in shown.text


async def test_a_change_without_credentials_is_refused_and_audited(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    app = create_app(client, token=TOKEN)
    async with _http(app, "192.0.2.44") as http:
        page = await http.get("/login")
        response = await http.post(f"/jobs/{job_id}/delete", data={"csrf": csrf_of(page.text)})
        assert response.status_code == 401
    [entry] = await client._store.audit_list(10)
    assert (entry.actor, entry.action, entry.detail["status"]) == (
        "dashboard:anonymous@192.0.2.44", "refused", 401)
    assert entry.detail["path"] == f"/jobs/{job_id}/delete"
    assert await client.get(job_id) is not None
