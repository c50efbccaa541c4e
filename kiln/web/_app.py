"""create_app: assembles the dashboard's routes, guard and error pages into one ASGI app.

Owns the wiring only. The app is a Starlette application that can be served on its
own (``serve``, ``kiln dashboard``) or mounted inside a user's ASGI application.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TypedDict

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kiln._app import App
from kiln._client._client import Client
from kiln._errors import (
    ConfigError,
    NotMigratedError,
    StoreError,
    UnreachableError,
    ValidationError,
)
from kiln._model._job import DEAD_AFTER
from kiln.web import (
    _actions,
    _api,
    _audit_page,
    _jobs,
    _login,
    _pages,
    _queue_actions,
    _queues_page,
    _runbooks,
    _server_actions,
)
from kiln.web._auth import Auth
from kiln.web._csrf import Csrf
from kiln.web._dashboard import HERE, Dashboard
from kiln.web._guard import Guard
from kiln.web._hosts import AllowedHosts
from kiln.web._source import Source

log = logging.getLogger("kiln.web")


class DashboardOptions(TypedDict, total=False):
    """create_app's keyword arguments, as ``kiln.web.serve(**options)`` passes them on
    (tests/web/test_serve_options.py checks that the two agree)."""

    token: str | None
    basic_auth: tuple[str, str] | None
    read_only: bool
    root_path: str
    secret: bytes | None
    count_ttl: float
    dead_after: float
    tokens: Mapping[str, str] | None
    allowed_hosts: Sequence[str]
    trusted_proxies: Sequence[str]
    refresh_interval: float


def create_app(
    database_url_or_app: str | App | Client,
    *,
    token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    read_only: bool = False,
    root_path: str = "",
    secret: bytes | None = None,
    count_ttl: float = 5.0,
    dead_after: float = DEAD_AFTER,
    tokens: Mapping[str, str] | None = None,
    allowed_hosts: Sequence[str] = (),
    trusted_proxies: Sequence[str] = (),
    refresh_interval: float = 5.0,
) -> Starlette:
    """The dashboard as an ASGI app.

    ``database_url_or_app``: a database URL, a ``kiln.App`` (its recurring jobs are
    shown too) or a ``kiln.Client``. ``token``: accepted as ``Authorization: Bearer``
    or through the login form, which sets a signed cookie. ``basic_auth``: a
    ``(user, password)`` pair. ``read_only`` hides every action and refuses them.
    ``root_path``: the prefix the browser sees when a proxy strips it (a ``Mount``
    inside another app is detected by itself). ``secret`` signs CSRF tokens; give the
    same one to every replica behind a load balancer. ``count_ttl``: how long the
    per-state counts are cached. ``dead_after``: heartbeat silence after which a
    server is shown as dead, and after which a job cancelled while running on it may
    be requeued (the servers' ``ServerConfig.dead_after``, or more).
    ``tokens``: named tokens (``{"alice": "..."}``), so the audit log says whose token
    acted. ``allowed_hosts``: Host names served besides 127.0.0.1, localhost and ::1
    (``*.example.com`` for sub-domains); every other Host gets a 400, which defeats
    DNS rebinding. ``trusted_proxies``: addresses or networks of reverse proxies whose
    X-Forwarded-For and X-Forwarded-Proto are believed (client address for the audit
    and the throttle; https for Secure cookies and the same-origin check).
    ``refresh_interval``: seconds between the auto-refreshes of live pages.
    """
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise ConfigError("root_path", root_path, "use a path like /kiln (no trailing slash)")
    if count_ttl < 0:
        raise ConfigError("count_ttl", count_ttl, "must not be negative")
    auth, hosts = _access(token, basic_auth, tokens, allowed_hosts)
    proxies = _networks(trusted_proxies)
    if not 0.2 <= refresh_interval <= 3600:
        raise ConfigError("refresh_interval", refresh_interval,
                          "must be between 0.2 and 3600 seconds")
    dashboard = Dashboard(
        source=Source(database_url_or_app, ttl=count_ttl),
        auth=auth,
        csrf=Csrf(secret),
        read_only=read_only,
        root_path=root_path,
        dead_after=dead_after,
        hosts=hosts,
        refresh_interval=refresh_interval,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        warming = asyncio.get_running_loop().create_task(
            dashboard.source.warm(), name="kiln-web-warm"
        )
        yield
        warming.cancel()
        await dashboard.source.close()

    app = Starlette(
        routes=_routes(),
        exception_handlers={
            HTTPException: _http_error,
            ValidationError: _validation_error,
            StoreError: _store_error,
        },
        lifespan=lifespan,
    )
    app.state.kiln = dashboard
    app.add_middleware(Guard, dashboard=dashboard)
    if proxies:
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        # added last, so it runs first: the Guard sees the client's address and scheme
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=proxies)
    return app


def _access(token: str | None, basic_auth: tuple[str, str] | None,
            tokens: Mapping[str, str] | None, allowed_hosts: Sequence[str],
            ) -> tuple[Auth, AllowedHosts]:
    auth = Auth(token=token, basic=basic_auth, tokens=tuple((tokens or {}).items()))
    hosts = AllowedHosts(allowed_hosts)
    if hosts.any and not auth.enabled:
        raise ConfigError("allowed_hosts", "*", "any host name is allowed only with "
                          "authentication: without it, DNS rebinding opens the dashboard")
    return auth, hosts


def _networks(entries: Sequence[str]) -> list[str]:
    for entry in entries:
        try:
            ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ConfigError("trusted_proxies", entry, "give IP addresses or networks "
                              "(10.0.0.0/8, 127.0.0.1): a proxy is trusted by its "
                              "address") from None
    return [e.strip() for e in entries]


def _routes() -> list[Route | Mount]:
    return [
        Route("/", _pages.overview, name="overview"),
        Route("/jobs", _jobs.listing, name="jobs"),
        Route("/jobs/requeue-all", _actions.requeue_all_confirm, name="requeue_all"),
        Route("/jobs/requeue-all", _actions.requeue_all, methods=["POST"]),
        Route("/jobs/bulk", _actions.bulk, methods=["POST"]),
        Route("/jobs/all/runs/{run_id}", _actions.bulk_progress, name="bulk_progress"),
        Route("/jobs/all/{action}", _actions.all_confirm, name="all_confirm"),
        Route("/jobs/all/{action}", _actions.all_apply, methods=["POST"]),
        Route("/jobs/goto", _jobs.goto, name="goto"),
        Route("/jobs/{job_id}", _jobs.detail, name="job"),
        Route("/jobs/{job_id}/{action}", _actions.single, methods=["POST"]),
        Route("/jobs/{job_id}/{action}", _actions.no_page, methods=["GET"]),
        Route("/queues", _queues_page.queues, name="queues"),
        Route("/kinds", _pages.kinds, name="kinds"),
        Route("/charts", _pages.charts_page, name="charts"),
        Route("/queues/control", _queue_actions.control, methods=["POST"]),
        Route("/servers", _pages.servers, name="servers"),
        Route("/servers/control", _server_actions.control, methods=["POST"]),
        Route("/recurring", _pages.recurring, name="recurring"),
        Route("/rate-limits", _pages.rate_limits, name="rate_limits"),
        Route("/audit", _audit_page.audit, name="audit"),
        Route("/runbooks", _runbooks.runbooks, name="runbooks"),
        Route("/login", _login.form, name="login"),
        Route("/login", _login.submit, methods=["POST"]),
        Route("/logout", _login.logout, methods=["POST"]),
        Route("/api", _api.index), Route("/api/", _api.index),
        Route("/api/overview", _api.overview),
        Route("/api/jobs", _api.jobs),
        Route("/api/jobs/{job_id}", _api.job),
        Route("/api/queues", _api.queues),
        Route("/api/servers", _api.servers),
        Route("/api/kinds", _api.kinds),
        Route("/api/series", _api.series),
        Route("/api/timings", _api.timings),
        Route("/api/errors", _api.errors),
        Route("/api/{rest:path}", _api.not_found),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _api.is_api(request):
        response = _api.error(exc.status_code, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        return response
    dashboard: Dashboard = request.app.state.kiln
    titles = {400: "Bad request", 403: "Forbidden", 404: "Not found", 405: "Not allowed"}
    response = dashboard.render(
        request, "error.html", status=exc.status_code,
        title=titles.get(exc.status_code, "Error"), message=exc.detail,
    )
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _validation_error(request: Request, exc: Exception) -> Response:
    if _api.is_api(request):
        return _api.error(400, str(exc))
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(request, "error.html", status=400, title="Bad request",
                            message=str(exc))


def _store_message(exc: Exception) -> str:
    """What a 503 says: what failed, never the driver's text (it names the database's
    address, user and schema: issue 44 N13). The log has the whole error."""
    if isinstance(exc, NotMigratedError):
        return "its tables are missing or older than this kiln: run `kiln migrate`"
    if isinstance(exc, UnreachableError):
        return "the database could not be reached (the dashboard's log says why)"
    operation = getattr(exc, "operation", "a read")
    return f"the database failed in {operation} (the dashboard's log says why)"


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("dashboard: store error on %s: %s", request.url.path, exc)
    if _api.is_api(request):
        return _api.error(503, f"the job store did not answer: {_store_message(exc)}")
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(
        request, "error.html", status=503, title="Database unavailable",
        message=f"The job store did not answer: {_store_message(exc)}",
    )
