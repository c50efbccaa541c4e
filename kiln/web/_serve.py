"""serve: run the dashboard under uvicorn, refusing to listen off loopback without auth.

Owns the loopback rule and reading credentials from the environment
(KILN_DASHBOARD_TOKEN, or KILN_DASHBOARD_USER with KILN_DASHBOARD_PASSWORD).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from kiln._app import App
from kiln._errors import ConfigError
from kiln.web._app import create_app
from kiln.web._auth import ENV_PASSWORD, ENV_TOKEN, ENV_USER, auth_from_env

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


def check_exposure(host: str, token: str | None, basic_auth: tuple[str, str] | None) -> None:
    if not is_loopback(host) and token is None and basic_auth is None:
        raise ConfigError(
            "host", host,
            "the dashboard refuses to listen beyond loopback without authentication: set "
            f"{ENV_TOKEN} (16+ characters), or {ENV_USER} and {ENV_PASSWORD}",
        )


def app_options(
    opts: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """create_app keyword arguments, with credentials from the environment when not given."""
    options = dict(opts)
    if options.get("token") is None and options.get("basic_auth") is None:
        auth = auth_from_env(environ)
        options["token"], options["basic_auth"] = auth.token, auth.basic
    return options


def serve(
    database_url: str | App,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    log_level: str = "info",
    **opts: Any,
) -> None:
    """Serve the dashboard until interrupted. ``opts`` are create_app's keyword arguments.

    Without ``token``/``basic_auth``, credentials come from KILN_DASHBOARD_TOKEN or
    KILN_DASHBOARD_USER + KILN_DASHBOARD_PASSWORD. Off loopback, one of them is required.
    """
    import uvicorn

    options = app_options(opts)
    check_exposure(host, options.get("token"), options.get("basic_auth"))
    app = create_app(database_url, **options)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, proxy_headers=False,
        server_header=False, lifespan="on",
    )
    uvicorn.Server(config).run()
