"""DNS rebinding and cross-origin state changes (issue 21, defect 1): the Host
allowlist and the same-origin check of every POST, over HTTP. The browser's view of
the same attack is in test_browser_rebinding.py."""

from __future__ import annotations

import argparse
import html

import httpx
import pytest

from kiln import Client, ConfigError
from kiln._model._job import JobState
from kiln.cli import dashboard as dashboard_cli
from kiln.web import create_app
from kiln.web._dashboard import SECURITY_HEADERS
from kiln.web._hosts import AllowedHosts, origin_refusal
from kiln.web._serve import listen_hosts
from tests.support.web import TOKEN, MakeHttp, csrf_of, fail_jobs

REBOUND = "rebind.attacker.example:8000"


def _has_security_headers(response: httpx.Response) -> bool:
    return all(response.headers.get(name) == value for name, value in SECURITY_HEADERS.items())


async def test_a_rebound_host_name_can_neither_read_nor_delete(http: httpx.AsyncClient,
                                                               client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    page = await http.get(f"/jobs/{job_id}")
    token = csrf_of(page.text)  # even with a valid token and cookie
    rebound = {"Host": REBOUND}
    for path in ("/jobs?state=failed", f"/jobs/{job_id}", "/", "/audit", "/login"):
        response = await http.get(path, headers=rebound)
        assert response.status_code == 400, path
        assert "does not answer to the host name" in html.unescape(response.text)
        assert "SMTP timeout" not in response.text and "email.send" not in response.text
        assert _has_security_headers(response)
    response = await http.post(f"/jobs/{job_id}/delete", data={"csrf": token}, headers=rebound)
    assert response.status_code == 400
    assert (await client.get(job_id)) is not None
    assert (await http.get(f"/jobs/{job_id}")).status_code == 200  # the real name works


async def test_loopback_names_with_any_port_are_served(http: httpx.AsyncClient) -> None:
    for host in ("127.0.0.1", "127.0.0.1:9999", "localhost", "LOCALHOST:8000", "[::1]:8000",
                 "localhost.:80"):
        assert (await http.get("/", headers={"Host": host})).status_code == 200, host
    for host in ("", "127.0.0.2", "localhost.attacker.example", "[::1", "x:y", "a b",
                 "127.0.0.1:99999", "evil.example"):
        assert (await http.get("/", headers={"Host": host})).status_code == 400, host


async def test_allowed_hosts_add_names(make_http: MakeHttp) -> None:
    http = make_http(allowed_hosts=["kiln.example.com", "*.corp.example"])
    for host in ("kiln.example.com", "kiln.example.com:443", "ops.corp.example",
                 "a.b.corp.example", "127.0.0.1"):
        assert (await http.get("/", headers={"Host": host})).status_code == 200, host
    for host in ("corp.example", "example.com", "kiln.example.com.evil.example"):
        assert (await http.get("/", headers={"Host": host})).status_code == 400, host


def test_allowed_hosts_entries_are_checked(client: Client) -> None:
    for entry in ("https://kiln.example.com", "kiln.example.com:8000", "a/b", "", "a b"):
        with pytest.raises(ConfigError, match="allowed_hosts"):
            create_app(client, allowed_hosts=[entry])
    with pytest.raises(ConfigError, match="only with authentication"):
        create_app(client, allowed_hosts=["*"])
    assert AllowedHosts(["*"]).allows("anything.example")
    create_app(client, allowed_hosts=["*"], token=TOKEN)


async def test_cross_origin_posts_are_refused_and_audited(http: httpx.AsyncClient,
                                                          client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    token = csrf_of((await http.get(f"/jobs/{job_id}")).text)
    refused = [
        {"Origin": "http://evil.example"},
        {"Origin": "http://localhost"},  # another loopback name is another origin
        {"Origin": "http://127.0.0.1:8001"},
        {"Origin": "https://127.0.0.1"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/attack.html"},
        {"Origin": "http://evil.example", "Referer": "http://127.0.0.1/jobs"},
    ]
    for headers in refused:
        response = await http.post(f"/jobs/{job_id}/delete", data={"csrf": token},
                                   headers=headers)
        assert response.status_code == 403, headers
        assert "Cross-origin request" in response.text
        assert _has_security_headers(response)
    assert (await client.get(job_id)) is not None
    entries = await client._store.audit_list(20)
    assert [(e.action, e.count) for e in entries] == [("refused", 0)] * len(refused)
    assert all(e.detail["path"] == f"/jobs/{job_id}/delete" for e in entries)
    assert "evil.example" in str(entries[-1].detail["reason"])

    same = {"Origin": "http://127.0.0.1", "Referer": "http://127.0.0.1/jobs/1"}
    response = await http.post(f"/jobs/{job_id}/requeue", data={"csrf": token}, headers=same)
    assert response.status_code == 303
    assert (await client.get(job_id)).state is JobState.AVAILABLE  # type: ignore[union-attr]


def test_origin_rule() -> None:
    assert origin_refusal("http", "127.0.0.1:8000", "http://127.0.0.1:8000", None) is None
    assert origin_refusal("https", "kiln.example.com", "https://kiln.example.com:443",
                          None) is None
    assert origin_refusal("http", "127.0.0.1", None, None) is None  # no browser: CSRF decides
    hint = origin_refusal("http", "kiln.example.com", "https://kiln.example.com", None)
    assert hint is not None and "trusted_proxies" in hint
    for origin in ("http://127.0.0.1:8001", "ftp://127.0.0.1:8000", "http://[::1]:8000",
                   "http://127.0.0.1:8000.evil", "garbage"):
        assert origin_refusal("http", "127.0.0.1:8000", origin, None) is not None, origin


def test_cli_allowed_hosts_and_the_listen_address() -> None:
    parser = argparse.ArgumentParser(prog="kiln")
    dashboard_cli.register(parser.add_subparsers())
    args = parser.parse_args(["dashboard", "--allowed-host", "kiln.example.com",
                              "--allowed-host", "*.corp.example"])
    assert args.allowed_host == ["kiln.example.com", "*.corp.example"]
    assert parser.parse_args(["dashboard"]).allowed_host == []
    assert listen_hosts("10.0.0.5", ["kiln.example.com"]) == ["kiln.example.com", "10.0.0.5"]
    assert listen_hosts("0.0.0.0", []) == [] and listen_hosts("::", ["a"]) == ["a"]
    assert listen_hosts("[fd00::5]", []) == ["fd00::5"]
