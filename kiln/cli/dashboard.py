"""``kiln dashboard``: serve the web dashboard (kiln.web) under uvicorn.

Owns the command's flags. Credentials never come from the command line (it shows in
``ps``): set KILN_DASHBOARD_TOKEN, or KILN_DASHBOARD_USER and KILN_DASHBOARD_PASSWORD.
Off loopback the dashboard refuses to start without one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kiln._app import DEFAULT_URL, App
from kiln._errors import ConfigError
from kiln.stores import store_from_url


def register(commands: Any, common: argparse.ArgumentParser | None = None) -> None:
    """Add the ``dashboard`` sub-command to ``commands`` (an argparse subparsers object)."""
    parser = commands.add_parser(
        "dashboard", parents=[common] if common is not None else [],
        help="serve the web dashboard",
        description="Serve the web dashboard. Authentication comes from the environment: "
        "KILN_DASHBOARD_TOKEN (16+ characters), KILN_DASHBOARD_TOKENS (name=token,...), or "
        "KILN_DASHBOARD_USER and KILN_DASHBOARD_PASSWORD (12+ characters); a well-known "
        "token or password (common words, the user name, a keyboard run) is refused at "
        "start-up. Without any it only listens on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--read-only", action="store_true",
                        help="hide every action and refuse them")
    parser.add_argument("--root-path", default="", metavar="PATH",
                        help="URL prefix when a reverse proxy strips one, e.g. /kiln")
    parser.add_argument("--app", default=None, metavar="MODULE:ATTR",
                        help="your kiln.App, to list its recurring jobs too")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a Host name to answer to besides 127.0.0.1, localhost and ::1 "
                        "(the name users open, e.g. kiln.example.com; *.example.com for "
                        "sub-domains); repeatable. Other names get a 400 (DNS rebinding)")
    parser.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDRESS",
                        help="address or network of a reverse proxy whose X-Forwarded-For "
                        "and X-Forwarded-Proto are believed (uvicorn's forwarded-allow-ips);"
                        " repeatable. Needed behind a TLS proxy for Secure cookies")
    parser.add_argument("--dead-after", type=float, default=60.0, metavar="SECONDS",
                        help="heartbeat silence after which a server shows as dead "
                        "(your ServerConfig.dead_after; default 60)")
    if common is None:
        parser.add_argument("--database-url", default=None, metavar="URL",
                            help="default: $KILN_DATABASE_URL, else sqlite:///kiln.db")
    parser.set_defaults(func=run)


add_parser = register  # the name the CLI's first sketch used


def load_app(spec: str) -> App:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("--app", spec, "use MODULE:ATTR, e.g. myproject.jobs:app")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not isinstance(target, App):
        raise ConfigError("--app", spec, f"expected a kiln.App, got {type(target).__name__}")
    return target


async def _check_schema(url: str) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        await store.schema_check()
    finally:
        await store.close()


def redacted(url: str) -> str:
    """``url`` without its password, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc[-1]}"))


def run(args: argparse.Namespace) -> int:
    from kiln.web._hosts import LOOPBACK_HOSTS
    from kiln.web._serve import app_options, check_exposure, listen_hosts, serve

    explicit: str | None = getattr(args, "database_url", None)
    app = load_app(args.app) if args.app else None
    url = explicit or (app.url if app else None) or os.environ.get("KILN_DATABASE_URL") \
        or DEFAULT_URL
    if app is not None and explicit and explicit != app.url:
        raise ConfigError("--database-url", explicit, f"--app {args.app} uses {app.url}")
    if not 0 < args.port < 65536:
        raise ConfigError("--port", args.port, "must be between 1 and 65535")
    options = app_options({"read_only": args.read_only, "root_path": args.root_path,
                           "dead_after": args.dead_after,
                           "allowed_hosts": args.allowed_host,
                           "trusted_proxies": args.trusted_proxy})
    check_exposure(args.host, options["token"], options["basic_auth"], options["tokens"])
    asyncio.run(_check_schema(url))
    print(f"kiln dashboard on http://{args.host}:{args.port}{args.root_path}/ "
          f"({redacted(url)})", flush=True)
    names = ", ".join([*LOOPBACK_HOSTS, *listen_hosts(args.host, args.allowed_host)])
    print(f"answering to the host names {names} (add others with --allowed-host)",
          flush=True)
    serve(app if app is not None else url, host=args.host, port=args.port,
          log_level="warning", **options)
    return 0
