"""serve: run the dashboard under uvicorn, refusing to listen off loopback without auth.

Owns the loopback rule, reading credentials from the environment
(KILN_DASHBOARD_TOKEN, KILN_DASHBOARD_TOKENS, or KILN_DASHBOARD_USER with
KILN_DASHBOARD_PASSWORD), and the Host names a served dashboard answers to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from kiln._app import App
from kiln._errors import ConfigError
from kiln.web._app import DashboardOptions, create_app
from kiln.web._auth import ENV_PASSWORD, ENV_TOKEN, ENV_TOKENS, ENV_USER, auth_from_env

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True only for addresses that other machines cannot reach (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name we would have to resolve: treat it as reachable


def check_exposure(host: str, token: str | None, basic_auth: tuple[str, str] | None,
                   tokens: Mapping[str, str] | None = None) -> None:
    if not is_loopback(host) and token is None and basic_auth is None and not tokens:
        raise ConfigError(
            "host", host,
            "the dashboard refuses to listen beyond loopback without authentication: set "
            f"{ENV_TOKEN} (16+ characters), {ENV_TOKENS} (name=token,...), or {ENV_USER} "
            f"and {ENV_PASSWORD}",
        )


def listen_hosts(host: str, allowed: Sequence[str]) -> list[str]:
    """``allowed`` plus the address listened on, when it is one a browser can open."""
    name = host.strip().strip("[]")
    try:
        unspecified = ipaddress.ip_address(name).is_unspecified
    except ValueError:
        unspecified = False
    extra = [] if unspecified or not name else [name]
    return [*allowed, *(h for h in extra if h not in allowed)]


def app_options(
    opts: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """create_app keyword arguments, with credentials from the environment when not given."""
    options = dict(opts)
    given = ("token", "basic_auth", "tokens")
    if all(options.get(name) is None for name in given):
        auth = auth_from_env(environ)
        options["token"], options["basic_auth"] = auth.token, auth.basic
        options["tokens"] = dict(auth.tokens) or None
    return options


def serve(
    database_url: str | App,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    log_level: str = "info",
    **opts: Unpack[DashboardOptions],
) -> None:
    """Serve the dashboard until interrupted. ``opts`` are create_app's keyword arguments.

    Without ``token``/``tokens``/``basic_auth``, credentials come from
    KILN_DASHBOARD_TOKEN, KILN_DASHBOARD_TOKENS or KILN_DASHBOARD_USER +
    KILN_DASHBOARD_PASSWORD. Off loopback, one of them is required. The address
    listened on joins ``allowed_hosts``. Forwarded headers are read by create_app,
    from ``trusted_proxies`` only, never by uvicorn from anyone.
    """
    import uvicorn

    options = app_options(opts)
    check_exposure(host, options.get("token"), options.get("basic_auth"), options.get("tokens"))
    options["allowed_hosts"] = listen_hosts(host, options.get("allowed_hosts") or ())
    app = create_app(database_url, **options)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, proxy_headers=False,
        server_header=False, lifespan="on",
    )
    uvicorn.Server(config).run()
