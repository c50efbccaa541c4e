"""create_app: assembles the dashboard's routes, guard and error pages into one ASGI app.

Owns the wiring only. The app is a Starlette application that can be served on its
own (``serve``, ``kiln dashboard``) or mounted inside a user's ASGI application.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiln._app import App
from kiln._client import Client
from kiln._errors import ConfigError, StoreError, ValidationError
from kiln.web import _actions, _jobs, _login, _pages
from kiln.web._auth import SESSION_COOKIE, Auth
from kiln.web._csrf import Csrf
from kiln.web._dashboard import HERE, SECURITY_HEADERS, Dashboard
from kiln.web._source import Source

log = logging.getLogger("kiln.web")
PUBLIC_PREFIX = "/static/"
PUBLIC_PATHS = ("/login",)
UNGUARDED_POSTS = ("/login", "/logout")  # allowed in read-only mode: they change no job


def create_app(
    database_url_or_app: str | App | Client,
    *,
    token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    read_only: bool = False,
    root_path: str = "",
    secret: bytes | None = None,
    count_ttl: float = 5.0,
    dead_after: float = 60.0,
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
    server is shown as dead (the servers' ``ServerConfig.dead_after``).
    """
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise ConfigError("root_path", root_path, "use a path like /kiln (no trailing slash)")
    if count_ttl < 0:
        raise ConfigError("count_ttl", count_ttl, "must not be negative")
    dashboard = Dashboard(
        source=Source(database_url_or_app, ttl=count_ttl),
        auth=Auth(token=token, basic=basic_auth),
        csrf=Csrf(secret),
        read_only=read_only,
        root_path=root_path,
        dead_after=dead_after,
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
    return app


def _routes() -> list[Route | Mount]:
    return [
        Route("/", _pages.overview, name="overview"),
        Route("/jobs", _jobs.listing, name="jobs"),
        Route("/jobs/requeue-all", _actions.requeue_all_confirm, name="requeue_all"),
        Route("/jobs/requeue-all", _actions.requeue_all, methods=["POST"]),
        Route("/jobs/bulk", _actions.bulk, methods=["POST"]),
        Route("/jobs/{job_id}", _jobs.detail, name="job"),
        Route("/jobs/{job_id}/{action}", _actions.single, methods=["POST"]),
        Route("/queues", _pages.queues, name="queues"),
        Route("/servers", _pages.servers, name="servers"),
        Route("/recurring", _pages.recurring, name="recurring"),
        Route("/rate-limits", _pages.rate_limits, name="rate_limits"),
        Route("/audit", _pages.audit, name="audit"),
        Route("/login", _login.form, name="login"),
        Route("/login", _login.submit, methods=["POST"]),
        Route("/logout", _login.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def route_path(scope: Scope) -> str:
    """The request path below the mount point."""
    path = str(scope["path"])
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        return path[len(root):] or "/"
    return path


class Guard:
    """Authentication, read-only refusal and security headers for every request."""

    def __init__(self, app: ASGIApp, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        request = Request(scope)
        path = route_path(scope)
        method = scope["method"]
        user = self.dashboard.auth.identify(request.headers, request.cookies)
        scope["kiln.user"] = user
        scope["kiln.cookie_session"] = self.dashboard.auth.session_valid(
            request.cookies.get(SESSION_COOKIE, "")
        )
        if user is None and path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIX):
            return _login.refuse(self.dashboard, request, path)
        if method == "POST" and self.dashboard.read_only and path not in UNGUARDED_POSTS:
            return self.dashboard.render(
                request, "error.html", status=403, title="Read-only",
                message="This dashboard is read-only: actions are disabled.",
            )
        return None


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
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
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(request, "error.html", status=400, title="Bad request",
                            message=str(exc))


async def _store_error(request: Request, exc: Exception) -> Response:
    log.warning("dashboard: store error on %s: %s", request.url.path, exc)
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(
        request, "error.html", status=503, title="Database unavailable",
        message=f"The job store did not answer: {exc}",
    )
