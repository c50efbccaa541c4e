"""Sessions and what they are bound to (issue 21, defects 2, 3 and 4): CSRF tokens bound
to the credential they were issued for, sign-out ending the session on the server,
and Secure cookies and real client addresses behind a trusted TLS proxy."""

from __future__ import annotations

import argparse
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx
import pytest

from kiln import Client, ConfigError
from kiln._model._job import JobState
from kiln.cli import dashboard as dashboard_cli
from kiln.web import create_app
from tests.support.web import BASE_URL, TOKEN, MakeHttp, csrf_of, fail_jobs

OTHER = "second-token-9876543210fedcba"


def _bare(app: object, client: tuple[str, int] = ("127.0.0.1", 123)) -> httpx.AsyncClient:
    """An HTTP client without a cookie jar: each test says which cookies it sends."""
    transport = httpx.ASGITransport(app=app, client=client)  # type: ignore[arg-type]
    keep_none = CookieJar(DefaultCookiePolicy(allowed_domains=[]))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL, cookies=keep_none)


def _set_cookies(response: httpx.Response) -> dict[str, str]:
    """name -> the whole Set-Cookie line."""
    return {line.split("=", 1)[0]: line for line in response.headers.get_list("set-cookie")}


def _value(line: str) -> str:
    return line.split(";", 1)[0].split("=", 1)[1]


async def _sign_in(http: httpx.AsyncClient, token: str = TOKEN,
                   headers: dict[str, str] | None = None) -> tuple[str, str]:
    """(session cookie, CSRF nonce cookie) of a fresh sign-in."""
    page = await http.get("/login", headers=headers)
    nonce = _value(_set_cookies(page)["kiln_csrf"])
    response = await http.post("/login", data={"token": token, "csrf": csrf_of(page.text)},
                               headers={**(headers or {}), "Cookie": f"kiln_csrf={nonce}"})
    assert response.status_code == 303, response.text
    return _value(_set_cookies(response)["kiln_session"]), nonce


async def test_an_anonymous_csrf_token_works_with_no_ones_credentials(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    app = create_app(client, token=TOKEN)
    async with _bare(app) as attacker, _bare(app) as victim:
        page = await attacker.get("/login")  # anyone may load the login form
        stolen_nonce = _value(_set_cookies(page)["kiln_csrf"])
        stolen_token = csrf_of(page.text)
        session, _ = await _sign_in(victim)
        # the attacker's nonce planted in the victim's browser, the attacker's token posted
        planted = {"Cookie": f"kiln_session={session}; kiln_csrf={stolen_nonce}"}
        response = await victim.post(f"/jobs/{job_id}/delete", data={"csrf": stolen_token},
                                     headers=planted)
        assert response.status_code == 403 and "CSRF" in response.text
        bearer = {"Authorization": f"Bearer {TOKEN}", "Cookie": f"kiln_csrf={stolen_nonce}"}
        response = await attacker.post(f"/jobs/{job_id}/delete", data={"csrf": stolen_token},
                                       headers=bearer)
        assert response.status_code == 403 and "CSRF" in response.text
        assert await client.get(job_id) is not None

        # the victim's own page carries a token for the victim's session, and it works
        own = await victim.get(f"/jobs/{job_id}", headers=planted)
        response = await victim.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf_of(own.text)},
                                     headers=planted)
        assert response.status_code == 303
        assert (await client.get(job_id)).state is JobState.AVAILABLE  # type: ignore[union-attr]


async def test_a_csrf_token_of_one_session_fails_with_another(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    app = create_app(client, tokens={"alice": TOKEN, "bob": OTHER})
    async with _bare(app) as http:
        alice, nonce = await _sign_in(http, TOKEN)
        bob, _ = await _sign_in(http, OTHER)
        page = await http.get("/", headers={"Cookie": f"kiln_session={alice}; kiln_csrf={nonce}"})
        response = await http.post(f"/jobs/{job_id}/delete", data={"csrf": csrf_of(page.text)},
                                   headers={"Cookie": f"kiln_session={bob}; kiln_csrf={nonce}"})
        assert response.status_code == 403
    assert await client.get(job_id) is not None


async def test_sign_out_ends_the_session_on_the_server(client: Client) -> None:
    app = create_app(client, token=TOKEN)
    async with _bare(app) as http:
        session, nonce = await _sign_in(http)
        cookies = {"Cookie": f"kiln_session={session}; kiln_csrf={nonce}"}
        home = await http.get("/", headers=cookies)
        assert home.status_code == 200 and "Sign out" in home.text
        out = await http.post("/logout", data={"csrf": csrf_of(home.text)}, headers=cookies)
        assert out.status_code == 303
        assert 'kiln_session=""' in _set_cookies(out)["kiln_session"]
        # the old cookie, replayed as if the browser had kept it: refused everywhere
        for path in ("/", "/jobs", "/audit"):
            replayed = await http.get(path, headers=cookies)
            assert replayed.status_code == 401, path
            assert 'action="/login"' in replayed.text
        again, _ = await _sign_in(http)  # a new sign-in works
        assert (await http.get("/", headers={"Cookie": f"kiln_session={again}"})).status_code \
            == 200
    actions = [e.action for e in await client._store.audit_list(10)]
    assert actions == ["login", "logout", "login"][::-1]


async def test_behind_a_trusted_tls_proxy_cookies_are_secure(client: Client) -> None:
    app = create_app(client, token=TOKEN, trusted_proxies=["127.0.0.1", "10.0.0.0/8"])
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    async with _bare(app) as http:
        page = await http.get("/login", headers=forwarded)
        assert "Secure" in _set_cookies(page)["__Host-kiln_csrf"]  # see test_cookie_prefix
        assert page.headers["strict-transport-security"] == "max-age=31536000"
        nonce = _value(_set_cookies(page)["__Host-kiln_csrf"])
        response = await http.post(
            "/login", data={"token": TOKEN, "csrf": csrf_of(page.text)},
            headers={**forwarded, "Origin": "https://127.0.0.1",
                     "Cookie": f"__Host-kiln_csrf={nonce}"})
        assert response.status_code == 303
        assert "Secure" in _set_cookies(response)["__Host-kiln_session"]
    [entry] = await client._store.audit_list(10)
    assert (entry.action, entry.actor) == ("login", "dashboard:token@203.0.113.7")


async def test_forwarded_headers_from_anyone_else_are_ignored(client: Client) -> None:
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    untrusted = create_app(client, token=TOKEN, trusted_proxies=["10.0.0.0/8"])
    for app, peer in ((create_app(client, token=TOKEN), "127.0.0.1"),
                      (untrusted, "198.51.100.9")):
        async with _bare(app, client=(peer, 5000)) as http:
            page = await http.get("/login", headers=forwarded)
            assert "Secure" not in _set_cookies(page)["kiln_csrf"]
            assert "strict-transport-security" not in page.headers
            wrong = await http.get("/", headers={**forwarded,
                                                 "Authorization": "Bearer " + "x" * 20})
            assert wrong.status_code == 401
    entries = await client._store.audit_list(10)
    assert [e.actor for e in entries] == ["dashboard:anonymous@198.51.100.9",
                                          "dashboard:anonymous@127.0.0.1"]


async def test_https_origin_without_a_trusted_proxy_says_what_to_set(
    make_http: MakeHttp, client: Client
) -> None:
    [job_id] = await fail_jobs(client, 1)
    http = make_http()
    page = await http.get(f"/jobs/{job_id}")
    response = await http.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf_of(page.text)},
                               headers={"Origin": "https://127.0.0.1"})
    assert response.status_code == 403 and "--trusted-proxy" in response.text


def test_trusted_proxies_are_addresses(client: Client) -> None:
    for entry in ("proxy.internal", "10.0.0.0/33", "*"):
        with pytest.raises(ConfigError, match="trusted_proxies"):
            create_app(client, trusted_proxies=[entry])
    parser = argparse.ArgumentParser(prog="kiln")
    dashboard_cli.register(parser.add_subparsers())
    args = parser.parse_args(["dashboard", "--trusted-proxy", "10.0.0.0/8",
                              "--trusted-proxy", "127.0.0.1"])
    assert args.trusted_proxy == ["10.0.0.0/8", "127.0.0.1"]
