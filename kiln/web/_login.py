"""Logging in and out: the token login form, its cookie, and the refusal of strangers.

Owns the responses to unauthenticated requests (a 401 with the login form, or a
basic-auth challenge) and the session cookie's lifetime. Credentials are checked by
kiln.web._auth.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from kiln.web._auth import SESSION_COOKIE, SESSION_MAX_AGE
from kiln.web._dashboard import Dashboard

FAILED_LOGIN_DELAY = 0.5  # seconds; slows down guessing


def safe_next(value: object) -> str:
    """A path inside the dashboard to return to after login; anything else goes home."""
    if not isinstance(value, str) or len(value) > 2000:
        return "/"
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(c) < 32 for c in value):
        return "/"
    return value


def refuse(dashboard: Dashboard, request: Request, path: str) -> Response:
    """401: the login form when a token is configured, else a basic-auth challenge."""
    if dashboard.auth.token is not None:
        target = path + (f"?{request.url.query}" if request.url.query else "")
        response = dashboard.render(
            request, "login.html", status=401, title="Sign in",
            next=safe_next(target) if request.method ==
            "GET" else "/", error=None,
        )
    else:
        response = dashboard.render(
            request, "error.html", status=401, title="Authentication required",
            message="Sign in with the dashboard's user name and password.",
        )
    if dashboard.auth.basic is not None:
        response.headers["www-authenticate"] = 'Basic realm="kiln dashboard", charset="UTF-8"'
    return response


async def form(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    if dashboard.auth.token is None:
        return dashboard.redirect(request, "/")
    return dashboard.render(
        request, "login.html", title="Sign in", next=safe_next(request.query_params.get("next")),
        error=None
    )


async def submit(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    data = await dashboard.form(request)
    target = safe_next(data.get("next"))
    candidate = data.get("token")
    if dashboard.auth.token is None:
        return dashboard.redirect(request, "/")
    if not isinstance(candidate, str) or not dashboard.auth.check_token(candidate):
        await asyncio.sleep(FAILED_LOGIN_DELAY)
        return dashboard.render(
            request, "login.html", status=401, title="Sign in", next=target,
            error="That token is not valid."
        )
    response = dashboard.redirect(request, target)
    dashboard.set_cookie(
        request, response, SESSION_COOKIE, dashboard.auth.session_issue(),
        max_age=SESSION_MAX_AGE,
    )
    return response


async def logout(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    await dashboard.form(request)
    response = dashboard.redirect(request, "/login")
    response.delete_cookie(SESSION_COOKIE, path=dashboard.base(request) or "/")
    return response
