"""Issue 44: over https the dashboard's cookies carry the prefix browsers enforce,
``__Host-`` at / (Secure, Path=/, no Domain: a sub-domain or a plain-http page cannot
plant or overwrite them), ``__Secure-`` under a path prefix (``__Host-`` requires
Path=/); a cookie planted under the bare name is not read over https. Plain http on
loopback keeps the bare names (a browser refuses a prefixed cookie without Secure)."""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

from kiln import Client
from kiln.web import create_app
from tests.support.web import BASE_URL, TOKEN, csrf_of, fail_jobs

HTTPS = {"X-Forwarded-Proto": "https"}


def _bare(app: object) -> httpx.AsyncClient:
    """No cookie jar: each request says which cookies it sends."""
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 123))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL,
                             cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))


def _set_cookies(response: httpx.Response) -> dict[str, str]:
    """name -> the whole Set-Cookie line."""
    return {line.split("=", 1)[0]: line for line in response.headers.get_list("set-cookie")}


def _value(line: str) -> str:
    return line.split(";", 1)[0].split("=", 1)[1]


async def test_https_cookies_are_host_prefixed_and_work(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    app = create_app(client, token=TOKEN, trusted_proxies=["127.0.0.1"])
    async with _bare(app) as http:
        page = await http.get("/login", headers=HTTPS)
        nonce_line = _set_cookies(page)["__Host-kiln_csrf"]
        assert "Secure" in nonce_line and "Path=/;" in nonce_line + ";"
        assert "Domain" not in nonce_line and "kiln_csrf" not in _set_cookies(page)
        nonce = _value(nonce_line)
        signed_in = await http.post(
            "/login", data={"token": TOKEN, "csrf": csrf_of(page.text)},
            headers={**HTTPS, "Origin": "https://127.0.0.1",
                     "Cookie": f"__Host-kiln_csrf={nonce}"})
        assert signed_in.status_code == 303, signed_in.text
        line = _set_cookies(signed_in)["__Host-kiln_session"]
        assert "Secure" in line and "HttpOnly" in line and "Domain" not in line
        session = _value(line)
        cookies = f"__Host-kiln_session={session}; __Host-kiln_csrf={nonce}"
        job = await http.get(f"/jobs/{job_id}", headers={**HTTPS, "Cookie": cookies})
        assert job.status_code == 200
        # an action works with the prefixed cookies
        done = await http.post(f"/jobs/{job_id}/delete", data={"csrf": csrf_of(job.text)},
                               headers={**HTTPS, "Origin": "https://127.0.0.1",
                                        "Cookie": cookies})
        assert done.status_code == 303 and await client.get(job_id) is None
        # the bare names, as a plain-http page or a sub-domain could plant them, are not read
        planted = f"kiln_session={session}; kiln_csrf={nonce}"
        assert (await http.get("/", headers={**HTTPS, "Cookie": planted})).status_code == 401
        # sign-out deletes the prefixed cookie (a browser needs Secure and Path=/ for it)
        out = await http.post("/logout", data={"csrf": csrf_of(job.text)},
                              headers={**HTTPS, "Origin": "https://127.0.0.1",
                                       "Cookie": cookies})
        gone = _set_cookies(out)["__Host-kiln_session"]
        assert out.status_code == 303 and "Max-Age=0" in gone and "Secure" in gone


async def test_https_under_a_path_prefix_uses_secure_prefix(client: Client) -> None:
    app = create_app(client, token=TOKEN, trusted_proxies=["127.0.0.1"], root_path="/kiln")
    async with _bare(app) as http:
        page = await http.get("/login", headers=HTTPS)
        cookies = _set_cookies(page)
        assert "__Host-kiln_csrf" not in cookies
        line = cookies["__Secure-kiln_csrf"]
        assert "Secure" in line and "Path=/kiln" in line


async def test_plain_http_on_loopback_keeps_bare_names(client: Client) -> None:
    app = create_app(client, token=TOKEN)
    async with _bare(app) as http:
        page = await http.get("/login")
        nonce = _value(_set_cookies(page)["kiln_csrf"])
        assert "Secure" not in _set_cookies(page)["kiln_csrf"]
        signed_in = await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)},
                                    headers={"Cookie": f"kiln_csrf={nonce}"})
        session = _value(_set_cookies(signed_in)["kiln_session"])
        assert (await http.get("/", headers={"Cookie": f"kiln_session={session}"})
                ).status_code == 200
