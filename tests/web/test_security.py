"""Authentication, CSRF, read-only mode and the loopback rule."""

from __future__ import annotations

import base64
import re

import httpx
import pytest

from kiln import Client, ConfigError
from kiln._model._job import JobState
from kiln.web._auth import ANONYMOUS, Auth, Identity, auth_from_env
from kiln.web._csrf import Csrf
from kiln.web._login import safe_next
from kiln.web._serve import app_options, check_exposure, is_loopback, serve
from tests.support.web import BASE_URL, TOKEN, MakeHttp, csrf_of, fail_jobs, post_form

PASSWORD = "correct horse battery"


async def test_token_refuses_requests_without_it(make_http: MakeHttp) -> None:
    http = make_http(token=TOKEN)
    for path in ("/", "/jobs?state=failed", "/jobs/1", "/audit"):
        response = await http.get(path)
        assert response.status_code == 401, path
        assert 'action="/login"' in response.text  # the login form, not the page
    wrong = await http.get("/", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert wrong.status_code == 401
    right = await http.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 200
    assert (await http.get("/static/kiln.css")).status_code == 200  # public


async def test_token_refuses_posts_without_it(make_http: MakeHttp, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    http = make_http(token=TOKEN)
    login = await http.get("/login")
    response = await http.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf_of(login.text)})
    assert response.status_code == 401
    assert (await client.get(job_id)).state is JobState.FAILED  # type: ignore[union-attr]


async def test_login_form_sets_a_cookie_that_lets_the_browser_in(make_http: MakeHttp) -> None:
    http = make_http(token=TOKEN)
    refused = await http.get("/jobs?state=failed")
    assert refused.status_code == 401
    bad = await http.post("/login", data={"token": "x" * 20, "next": "/jobs",
                                          "csrf": csrf_of(refused.text)})
    assert bad.status_code == 401 and "not valid" in bad.text
    assert "kiln_session" not in http.cookies
    ok = await http.post("/login", data={"token": TOKEN, "next": "/jobs?state=failed",
                                         "csrf": csrf_of(refused.text)})
    assert ok.status_code == 303
    assert ok.headers["location"] == "/jobs?state=failed"
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert (await http.get("/jobs?state=failed")).status_code == 200
    # one hex digit of the signature changed (replacing the last two with "00" left
    # 1 cookie in 256 intact, whose digest ended so: ci of 2026-12-07, 200 == 401)
    signed = http.cookies["kiln_session"]
    tampered = signed[:-1] + ("1" if signed[-1] == "0" else "0")
    http.cookies.set("kiln_session", tampered)
    assert (await http.get("/")).status_code == 401


async def test_logout_ends_the_session(make_http: MakeHttp) -> None:
    http = make_http(token=TOKEN)
    page = await http.get("/login")
    await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)})
    home = await http.get("/")
    assert home.status_code == 200 and "Sign out" in home.text
    out = await http.post("/logout", data={"csrf": csrf_of(home.text)})
    assert out.status_code == 303
    assert (await http.get("/")).status_code == 401


async def test_login_cannot_redirect_off_site(make_http: MakeHttp) -> None:
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil", "jobs", "/a\nb"):
        assert safe_next(target) == "/"
    assert safe_next("/jobs?state=failed") == "/jobs?state=failed"


async def test_basic_auth(make_http: MakeHttp) -> None:
    http = make_http(basic_auth=("alice", "correct horse"))
    refused = await http.get("/")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Basic ")
    wrong = await http.get("/", auth=("alice", "wrong"))
    assert wrong.status_code == 401
    garbage = await http.get("/", headers={"Authorization": "Basic %%%"})
    assert garbage.status_code == 401
    ok = await http.get("/", auth=("alice", "correct horse"))
    assert ok.status_code == 200 and "alice" in ok.text


async def test_actions_are_audited_with_the_user(make_http: MakeHttp, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    http = make_http(basic_auth=("alice", "correct horse"))
    http.auth = httpx.BasicAuth("alice", "correct horse")
    response = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/requeue", {})
    assert response.status_code == 303
    [entry] = await client._store.audit_list(10)
    assert entry.actor.startswith("dashboard:alice@")
    assert (entry.action, entry.count) == ("requeue", 1)


async def test_post_without_csrf_is_refused(http: httpx.AsyncClient, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    page = await http.get(f"/jobs/{job_id}")
    token = csrf_of(page.text)
    attempts = [
        (f"/jobs/{job_id}/requeue", {}),
        (f"/jobs/{job_id}/requeue", {"csrf": "0" * 64}),
        ("/jobs/bulk", {"action": "delete", "ids": str(job_id)}),
        ("/jobs/requeue-all", {"state": "failed"}),
    ]
    for path, data in attempts:
        response = await http.post(path, data=data)
        assert response.status_code == 403, path
        assert "CSRF" in response.text
    # the right token with someone else's cookie (or none) is refused too
    other = httpx.AsyncClient(transport=http._transport, base_url=BASE_URL)
    async with other:
        response = await other.post(f"/jobs/{job_id}/requeue", data={"csrf": token})
        assert response.status_code == 403
    assert (await client.get(job_id)).state is JobState.FAILED  # type: ignore[union-attr]
    entries = await client._store.audit_list(10)  # each refusal is audited, nothing acted
    assert [(e.action, e.count, e.detail["status"]) for e in entries] == [("refused", 0, 403)] * 5


async def test_read_only_hides_actions_and_refuses_them(make_http: MakeHttp,
                                                        client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    secret = b"s" * 32
    http = make_http(read_only=True, secret=secret)
    for path in (f"/jobs/{job_id}", "/jobs?state=failed", "/"):
        page = (await http.get(path)).text
        assert "read-only" in page
        assert not re.search(r'<form method="post"', page), path
        assert 'id="requeue-all"' not in page
    # the forms are hidden: make the token they would carry
    valid_csrf = Csrf(secret).token_for(http.cookies["kiln_csrf"], ANONYMOUS.binding)
    for path, data in ((f"/jobs/{job_id}/requeue", {}), ("/jobs/requeue-all",
                                                         {"state": "failed"}),
                       ("/jobs/bulk", {"action": "requeue", "ids": str(job_id)})):
        response = await http.post(path, data={**data, "csrf": valid_csrf})
        assert response.status_code == 403, path
        assert "read-only" in response.text
    assert (await client.get(job_id)).state is JobState.FAILED  # type: ignore[union-attr]


def test_loopback_rule() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.com", "192.168.1.1"):
        assert not is_loopback(host), host
    check_exposure("127.0.0.1", None, None)
    check_exposure("0.0.0.0", TOKEN, None)
    check_exposure("0.0.0.0", None, ("u", PASSWORD))
    with pytest.raises(ConfigError, match="KILN_DASHBOARD_TOKEN"):
        check_exposure("0.0.0.0", None, None)


def test_serve_refuses_to_listen_off_loopback_without_auth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("KILN_DASHBOARD_TOKEN", "KILN_DASHBOARD_USER", "KILN_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="refuses to listen beyond loopback"):
        serve("sqlite:///never-created.db", host="0.0.0.0", port=1)


def test_credentials_from_the_environment() -> None:
    assert auth_from_env({}) == Auth()
    assert auth_from_env({"KILN_DASHBOARD_TOKEN": TOKEN}).token == TOKEN
    both = auth_from_env({"KILN_DASHBOARD_USER": "u", "KILN_DASHBOARD_PASSWORD": PASSWORD})
    assert both.basic == ("u", PASSWORD)
    with pytest.raises(ConfigError, match="needs both"):
        auth_from_env({"KILN_DASHBOARD_USER": "u"})
    with pytest.raises(ConfigError, match="16 characters"):
        Auth(token="short")
    options = app_options({"read_only": True}, {"KILN_DASHBOARD_TOKEN": TOKEN})
    assert options == {"read_only": True, "token": TOKEN, "basic_auth": None, "tokens": None}
    assert TOKEN not in repr(Auth(token=TOKEN))


def test_basic_header_parsing_is_strict() -> None:
    auth = Auth(basic=("u", PASSWORD))
    good = base64.b64encode(f"u:{PASSWORD}".encode()).decode()
    assert auth.identify({"authorization": f"Basic {good}"}) == Identity("u", "basic")
    for value in (base64.b64encode(b"u:x").decode(), base64.b64encode(b"up").decode(), "!!"):
        assert auth.identify({"authorization": f"Basic {value}"}) is None
