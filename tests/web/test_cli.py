"""``kiln dashboard``: its flags, and its refusal to listen off loopback without auth."""

from __future__ import annotations

import argparse

import pytest

from kiln import ConfigError
from kiln.cli import dashboard


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kiln")
    dashboard.register(parser.add_subparsers())
    return parser.parse_args(["dashboard", *argv])


def test_flags_and_defaults() -> None:
    args = _parse()
    assert (args.host, args.port, args.read_only, args.root_path) == ("127.0.0.1", 8000,
                                                                      False, "")
    args = _parse("--host", "0.0.0.0", "--port", "9000", "--read-only", "--root-path", "/k")
    assert (args.host, args.port, args.read_only, args.root_path) == ("0.0.0.0", 9000,
                                                                      True, "/k")
    assert args.func is dashboard.run


def test_refuses_off_loopback_without_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KILN_DASHBOARD_TOKEN", "KILN_DASHBOARD_USER", "KILN_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    args = _parse("--host", "0.0.0.0", "--database-url", "sqlite:///does-not-matter.db")
    with pytest.raises(ConfigError, match="KILN_DASHBOARD_TOKEN"):
        dashboard.run(args)


def test_app_spec_and_password_redaction() -> None:
    with pytest.raises(ConfigError, match="MODULE:ATTR"):
        dashboard.load_app("no-colon")
    with pytest.raises(ConfigError, match=r"expected a kiln\.App"):
        dashboard.load_app("kiln:VERSION")
    assert dashboard.redacted("postgresql://u:secret@db:5432/x") == "postgresql://u:***@db:5432/x"
    assert dashboard.redacted("sqlite:///kiln.db") == "sqlite:///kiln.db"


def test_host_and_proxy_flags_reach_the_app(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import kiln.web._serve

    served: dict[str, object] = {}

    async def no_schema_check(_url: str) -> None:
        return None

    monkeypatch.setattr(dashboard, "_check_schema", no_schema_check)
    monkeypatch.setattr(kiln.web._serve, "serve", lambda *a, **kw: served.update(kw))
    monkeypatch.setenv("KILN_DASHBOARD_TOKEN", "cli-test-token-0123456789")
    args = _parse("--host", "10.0.0.5", "--allowed-host", "kiln.example.com",
                  "--trusted-proxy", "10.0.0.0/8", "--database-url", "sqlite:///x.db")
    assert dashboard.run(args) == 0
    assert served["allowed_hosts"] == ["kiln.example.com"]
    assert served["trusted_proxies"] == ["10.0.0.0/8"]
    out = capsys.readouterr().out
    assert "answering to the host names 127.0.0.1, localhost, ::1, kiln.example.com, " \
        "10.0.0.5" in out
