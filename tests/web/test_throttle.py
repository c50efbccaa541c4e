"""Guessing credentials (issue 21, defect 5): weak secrets refused at start-up with the
rule they break, failed attempts throttled per client (429 with Retry-After), and
comparisons that do not depend on where the guess goes wrong."""

from __future__ import annotations

import httpx
import pytest

from kiln import Client, ConfigError
from kiln.cli import dashboard as dashboard_cli
from kiln.web import create_app
from kiln.web._auth import Auth, auth_from_env, same
from kiln.web._throttle import Throttle, client_key
from tests.support.web import BASE_URL, TOKEN, csrf_of, fail_jobs

PASSWORD = "correct horse battery"


def _http(app: object, address: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL)


@pytest.mark.parametrize("token", ["short", " " * 16, " " * 40, "a" * 32, "abababab" * 4,
                                   "token with spaces in it ok", "tab\tseparated-token-xyz",
                                   "nul\x00-in-the-token-0123"])
def test_weak_tokens_are_refused_with_the_rule(token: str) -> None:
    with pytest.raises(ConfigError, match="at least 16 characters, 8 of them different"):
        Auth(token=token)
    with pytest.raises(ConfigError, match="at least 16 characters"):
        auth_from_env({"KILN_DASHBOARD_TOKEN": token})


@pytest.mark.parametrize("password", ["p", "x" * 11, " " * 20, "aaaaaaaaaaaaaaaa", "abcabcabcabc"])
def test_weak_passwords_are_refused_with_the_rule(password: str) -> None:
    with pytest.raises(ConfigError, match="at least 12 characters, 6 of them different"):
        Auth(basic=("alice", password))


@pytest.mark.parametrize(("password", "why"), [
    ("Password123!", "common password words"), ("p@ssw0rd-2024", "common password words"),
    ("Kiln-Dashboard1", "common password words"), ("adminadmin123", "common password words"),
    ("123456789012", "only digits"), ("qwertyuiop[]", "common password words"),
    ("abcdefghijkl", "a run of neighbouring keys"), ("alice-alice-2024", "the user name"),
    ("Alice2024!!!!", "the user name")])
def test_well_known_passwords_are_refused_naming_the_rule(password: str, why: str) -> None:
    with pytest.raises(ConfigError, match="must not be a well-known one") as refused:
        Auth(basic=("alice", password))
    assert f"this one is {why}" in str(refused.value) and password not in str(refused.value)


@pytest.mark.parametrize("token", ["password-1234567890", "qwertyuiop1234567", "changeme-changeme",
                                   "P@ssw0rd!2345678", "0987654321-0987654321"])
def test_well_known_tokens_are_refused(token: str) -> None:
    with pytest.raises(ConfigError, match="dashboard token must not be a well-known one"):
        Auth(tokens=(("ci", token),))
    with pytest.raises(ConfigError, match="well-known"):
        auth_from_env({"KILN_DASHBOARD_TOKENS": f"ci={token}"})


def test_strong_secrets_pass() -> None:
    import secrets

    for _ in range(200):  # generated ones never trip the well-known check
        Auth(token=secrets.token_urlsafe(24), basic=("alice", secrets.token_hex(12)))
    Auth(basic=("alice", "correct horse battery"), token="Tr0ub4dor&3-xK9mP2vL5")


def test_names_and_users_are_checked() -> None:
    Auth(basic=("alice", PASSWORD), tokens=(("ci", TOKEN),))
    for user in ("", "a:b", " alice", "al\nice"):
        with pytest.raises(ConfigError, match="user name"):
            Auth(basic=(user, PASSWORD))
    with pytest.raises(ConfigError, match="token name"):
        Auth(tokens=(("has space", TOKEN),))
    with pytest.raises(ConfigError, match="share one token"):
        Auth(tokens=(("a", TOKEN), ("b", TOKEN)))
    assert dict(auth_from_env({"KILN_DASHBOARD_TOKENS": f"alice={TOKEN}, ci=x{TOKEN}"})
                .tokens) == {"alice": TOKEN, "ci": "x" + TOKEN}
    with pytest.raises(ConfigError, match="name=token"):
        auth_from_env({"KILN_DASHBOARD_TOKENS": TOKEN})


def test_the_cli_refuses_a_weak_token_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    monkeypatch.setenv("KILN_DASHBOARD_TOKEN", " " * 16)
    parser = argparse.ArgumentParser(prog="kiln")
    dashboard_cli.register(parser.add_subparsers())
    args = parser.parse_args(["dashboard", "--database-url", "sqlite:///never-created.db"])
    with pytest.raises(ConfigError, match="no whitespace"):
        dashboard_cli.run(args)


async def test_basic_auth_guesses_are_throttled_per_client(client: Client) -> None:
    app = create_app(client, basic_auth=("alice", PASSWORD))
    async with _http(app) as guesser, _http(app, "127.0.0.9") as other:
        for i in range(10):
            response = await guesser.get("/", auth=("alice", f"guess-{i}"))
            assert response.status_code == 401, i
        blocked = await guesser.get("/", auth=("alice", "guess-10"))
        assert blocked.status_code == 429
        assert 1 <= int(blocked.headers["retry-after"]) <= 60
        assert "Too many failed attempts" in blocked.text
        # the right password does not get through either while the client is blocked
        assert (await guesser.get("/", auth=("alice", PASSWORD))).status_code == 429
        # another client is not affected
        assert (await other.get("/", auth=("alice", PASSWORD))).status_code == 200
    failures = [e for e in await client._store.audit_list(50) if e.action == "login-failed"]
    assert len(failures) == 10  # the blocked ones are not written
    assert failures[0].detail["user"] == "alice" and failures[0].detail["scheme"] == "Basic"


async def test_bearer_and_login_form_guesses_are_throttled(client: Client) -> None:
    app = create_app(client, token=TOKEN)
    async with _http(app) as http:
        for i in range(5):
            response = await http.get("/", headers={"Authorization": f"Bearer guess-{i:020}"})
            assert response.status_code == 401
        page = await http.get("/login")
        for i in range(5):
            response = await http.post("/login", data={"token": f"guess-{i:020}",
                                                       "csrf": csrf_of(page.text)})
            assert response.status_code == 401
        response = await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)})
        assert response.status_code == 429 and "retry-after" in response.headers
        # a page without credentials still answers (with the login form)
        assert (await http.get("/")).status_code == 401


def test_the_throttle_window_slides() -> None:
    now = [1000.0]
    throttle = Throttle(limit=3, window=60.0, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
        now[0] += 10
    assert throttle.retry_after("a") == 30  # the first failure leaves the window at 1060
    assert throttle.retry_after("b") is None
    now[0] = 1060.5
    assert throttle.retry_after("a") is None


def test_an_ipv6_client_is_counted_by_its_64() -> None:
    throttle = Throttle(limit=2, window=60.0)
    throttle.failed("2001:db8:1:2::1")
    throttle.failed("2001:db8:1:2:ffff::9")  # another address of the same /64
    assert throttle.retry_after("2001:db8:1:2::77") is not None
    assert throttle.retry_after("2001:db8:1:3::1") is None
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1" and client_key("10.0.0.1") == "10.0.0.1"
    assert client_key("unknown") == "unknown"


def test_comparisons_are_constant_time_over_digests() -> None:
    assert same(TOKEN, TOKEN) and not same(TOKEN, TOKEN[:-1]) and not same(TOKEN, TOKEN + "x")
    assert not same("", TOKEN) and same("", "")
    auth = Auth(tokens=(("a", TOKEN), ("b", "x" + TOKEN)))
    assert auth.token_name("x" + TOKEN) == "b" and auth.token_name(TOKEN) == "a"
    assert auth.token_name(TOKEN[:-1]) is None


async def test_refused_cross_site_posts_never_lock_the_operator_out(client: Client) -> None:
    """Issue 44 N1: any page the operator has open can make their browser post to the
    dashboard; those refusals are audited but never count toward the throttle."""
    app = create_app(client, token=TOKEN)
    [job_id] = await fail_jobs(client, 1)
    async with _http(app) as http:
        page = await http.get("/login")
        signed_in = await http.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)})
        assert signed_in.status_code == 303
        job_page = await http.get(f"/jobs/{job_id}")
        for i in range(12):  # a foreign origin, then no CSRF token, then no session
            refused = await http.post(f"/jobs/{job_id}/requeue", data={"x": "1"},
                                      headers={"Origin": "http://127.0.0.1:9"} if i % 2 else {})
            assert refused.status_code == 403, i
        requeued = await http.post(f"/jobs/{job_id}/requeue",
                                   data={"csrf": csrf_of(job_page.text)})
        assert requeued.status_code == 303 and "n=1" in requeued.headers["location"]
    async with _http(app) as fresh:  # sign-in from the same address still works
        page = await fresh.get("/login")
        for _ in range(10):
            assert (await fresh.post("/login", data={"token": "x"},
                                     headers={"Origin": "http://evil.test"})).status_code == 403
        again = await fresh.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text)})
        assert again.status_code == 303
    refusals = [e for e in await client._store.audit_list(50) if e.action == "refused"]
    assert len(refusals) == 22  # each one is still audited
