"""Logging in and out: the token login form, its cookie, and the refusal of strangers.

Owns the responses to unauthenticated requests (a 401 with the login form, or a
basic-auth challenge), signing in (a session cookie, audited) and signing out (the
session revoked on the server, audited). Credentials are checked by kiln.web._auth;
failed sign-ins count against the client in kiln.web._throttle.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from kiln.web import _api, _audit
from kiln.web._auth import Identity
from kiln.web._dashboard import Dashboard, identity
from kiln.web._sessions import SESSION_COOKIE, SESSION_MAX_AGE


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
    """401: the login form when a token is configured, else a basic-auth challenge;
    under /api/ a JSON error (with the same challenge)."""
    if _api.is_api(request):
        how = ("an Authorization: Bearer <token> header" if dashboard.auth.has_tokens
               else "basic auth")
        response = _api.error(401, f"Authentication required: send {how}.", "unauthorized")
    elif dashboard.auth.has_tokens:
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
    if not dashboard.auth.has_tokens:
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
    if not dashboard.auth.has_tokens:
        return dashboard.redirect(request, "/")
    name = dashboard.auth.token_name(candidate) if isinstance(candidate, str) else None
    if name is None:
        dashboard.throttle.failed(_audit.client_address(request.scope))
        await _audit.record(dashboard, request.scope, "login-failed", {"scheme": "form"})
        return dashboard.render(
            request, "login.html", status=401, title="Sign in", next=target,
            error="That token is not valid."
        )
    cookie = dashboard.sessions.issue(name)
    signed_in = dashboard.sessions.identify(cookie)
    request.scope["kiln.identity"] = signed_in
    await _audit.record(dashboard, request.scope, "login", {"scheme": "form"})
    response = dashboard.redirect(request, target)
    dashboard.set_cookie(request, response, SESSION_COOKIE, cookie, max_age=SESSION_MAX_AGE)
    return response


async def logout(request: Request) -> Response:
    """Ends the session on the server too: the old cookie is refused from now on."""
    dashboard: Dashboard = request.app.state.kiln
    await dashboard.form(request)
    who: Identity = identity(request)
    if dashboard.sessions.revoke(dashboard.cookie(request, SESSION_COOKIE) or ""):
        await _audit.record(dashboard, request.scope, "logout", {"scheme": who.via})
    response = dashboard.redirect(request, "/login")
    dashboard.delete_cookie(request, response, SESSION_COOKIE)
    return response
