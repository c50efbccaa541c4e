"""Guard: the middleware every request of the dashboard passes, whatever its route.

Owns, in this order: the Host allowlist (DNS rebinding), the per-client throttle of
failed attempts, authentication (or the identity that a host application's own
authentication put in the scope, ``HOST_IDENTITY``), and for every state-changing
request (any method but GET, HEAD and OPTIONS) the same-origin check, read-only
refusal and CSRF check, each refusal audited; then the security headers of every
response, and a 500 page with those headers for a bug that escapes a handler. Routes
added later get all of it without asking for it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kiln.web import _api, _audit, _login
from kiln.web._auth import ANONYMOUS, Identity
from kiln.web._csrf import CSRF_COOKIE, CSRF_FIELD, CSRF_HEADER
from kiln.web._dashboard import SECURITY_HEADERS, Dashboard
from kiln.web._hosts import origin_refusal
from kiln.web._sessions import SESSION_COOKIE

log = logging.getLogger("kiln.web")
PUBLIC_PREFIX = "/static/"
PUBLIC_PATHS = ("/login",)
UNGUARDED_POSTS = ("/login", "/logout")  # allowed in read-only mode: they change no job
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
HSTS = b"max-age=31536000"  # a year; not includeSubDomains: the dashboard owns one name
MAX_BODY = 1 << 20  # bytes; a selection of 1000 ids is about 20 KB
Next = Callable[[Scope, Receive, Send], Awaitable[None]]
# set in the ASGI scope by a host application's integration (kiln.contrib) that has
# authenticated the user itself: who acts, for the audit log and the CSRF binding
HOST_IDENTITY = "kiln.host_identity"


def route_path(scope: Scope) -> str:
    """The request path below the mount point."""
    path = str(scope["path"])
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        return path[len(root):] or "/"
    return path


class Refused(Exception):
    """A request the Guard answers itself, with ``response``."""

    def __init__(self, response: Response) -> None:
        self.response = response


class Guard:
    def __init__(self, app: ASGIApp, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": self._headers(scope, message)}
            await send(message)

        try:
            try:
                receive = await self._screen(scope, receive)
            except Refused as refused:
                await refused.response(scope, receive, send_with_headers)
                return
            await self.app(scope, receive, send_with_headers)
        except Exception:
            if started:
                raise
            log.exception("dashboard: unhandled error on %s %s", scope["method"],
                          scope["path"])
            await self._error(scope, 500, "Internal error",
                              "The dashboard failed on this request; its log has the "
                              "details.")(scope, receive, send_with_headers)

    def _headers(self, scope: Scope, start: Message) -> list[tuple[bytes, bytes]]:
        """The response's headers, plus the security headers and a new CSRF nonce."""
        headers = list(start.get("headers", []))
        present = {k.lower() for k, _ in headers}
        for name, value in SECURITY_HEADERS.items():
            if name.encode() not in present:
                headers.append((name.encode(), value.encode()))
        cookie = self.dashboard.nonce_cookie(Request(scope))
        if cookie is not None:
            headers.append(cookie)
        if scope.get("scheme") == "https" and b"strict-transport-security" not in present:
            headers.append((b"strict-transport-security", HSTS))  # stay on https
        return headers

    def _error(self, scope: Scope, status: int, title: str, message: str,
               code: str | None = None) -> Response:
        """The refusal's page, or under /api/ its JSON error (``code``: see _api.CODES)."""
        if _api.is_api_path(route_path(scope)):
            return _api.error(status, message, code)
        try:
            return self.dashboard.render(Request(scope), "error.html", status=status,
                                         title=title, message=message)
        except Exception:  # never fail to answer
            return Response(f"{title}: {message}", status_code=status,
                            media_type="text/plain")

    async def _count_refusal(self, scope: Scope, status: int, reason: str) -> None:
        """A refused change: audited, never throttled. Any page the operator has open
        can make their browser send these (a cross-site form or ``fetch``), so counting
        them would let any website lock the operator out; the throttle counts only wrong
        credentials, which another site cannot send on the operator's behalf."""
        await _audit.record(self.dashboard, scope, "refused",
                            {"status": status, "reason": reason[:300]})

    async def _refuse(self, scope: Scope, status: int, title: str, reason: str,
                      code: str) -> Refused:
        await self._count_refusal(scope, status, reason)
        return Refused(self._error(scope, status, title, reason, code))

    async def _screen(self, scope: Scope, receive: Receive) -> Receive:
        """The receive channel for the route; raises Refused to answer here instead."""
        dashboard, request = self.dashboard, Request(scope)
        host = request.headers.get("host", "")
        # a host application that signed the user in (kiln.contrib) answers for its Host
        if HOST_IDENTITY not in scope and not dashboard.hosts.allows(host):
            raise Refused(self._error(
                scope, 400, "Unknown host",
                f"This dashboard does not answer to the host name {host[:100]!r}. Open it "
                "by an address it serves (http://127.0.0.1:<port>/), or add the name with "
                "--allowed-host (allowed_hosts=).", "unknown_host",
            ))
        path = route_path(scope)
        changing = scope["method"] not in SAFE_METHODS
        await self._authenticate(scope, request, path, changing)
        if not changing:
            return receive
        reason = origin_refusal(request.url.scheme, host, request.headers.get("origin"),
                                request.headers.get("referer"))
        if reason is not None:
            raise await self._refuse(scope, 403, "Forbidden", f"Cross-origin request: {reason}.",
                                     "cross_origin")
        if dashboard.read_only and path not in UNGUARDED_POSTS:
            raise await self._refuse(scope, 403, "Read-only",
                                     "This dashboard is read-only: actions are disabled.",
                                     "read_only")
        return await self._check_csrf(scope, request, receive)

    async def _authenticate(self, scope: Scope, request: Request, path: str,
                            changing: bool) -> None:
        dashboard = self.dashboard
        address = _audit.client_address(scope)
        presented = dashboard.auth.presented(request.headers)
        wait = dashboard.throttle.retry_after(address)
        # only a guess waits: credentials presented, or the login form posted; a signed-in
        # session's requests never do (a failed guess from its address cannot block it)
        guessing = presented or (changing and path == "/login")
        if wait is not None and guessing:
            response = self._error(
                scope, 429, "Too many attempts",
                f"Too many failed attempts from {address}: try again in {wait} s.",
                "too_many_attempts")
            response.headers["retry-after"] = str(wait)
            raise Refused(response)
        who = self._identify(request)
        scope["kiln.identity"] = who
        scope["kiln.user"] = who.user if who is not None else None
        if presented and who is None:
            dashboard.throttle.failed(address)
            await _audit.record(dashboard, scope, "login-failed", {
                "user": dashboard.auth.attempted_user(request.headers),
                "scheme": request.headers.get("authorization", "").partition(" ")[0][:20]})
            raise Refused(_login.refuse(dashboard, request, path))
        public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)
        if who is None and not public:
            if changing:
                await self._count_refusal(scope, 401, "not signed in")
            raise Refused(_login.refuse(dashboard, request, path))

    def _identify(self, request: Request) -> Identity | None:
        host: Identity | None = request.scope.get(HOST_IDENTITY)
        if host is not None:
            return host
        auth = self.dashboard.auth
        if not auth.enabled:
            return ANONYMOUS
        if auth.presented(request.headers):
            return auth.identify(request.headers)
        return self.dashboard.sessions.identify(
            self.dashboard.cookie(request, SESSION_COOKIE) or "")

    async def _check_csrf(self, scope: Scope, request: Request, receive: Receive) -> Receive:
        body = await _body(receive)
        if body is None:
            raise Refused(self._error(scope, 413, "Too large",
                                      f"The request body exceeds {MAX_BODY} bytes.", "too_large"))
        submitted = request.headers.get(CSRF_HEADER)
        if request.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded"):
            fields = parse_qsl(body.decode("latin-1"), keep_blank_values=True)
            submitted = next((v for k, v in fields if k == CSRF_FIELD), submitted)
        elif request.headers.get("content-type", "").startswith("multipart/form-data"):
            submitted = await _multipart_field(scope, body, submitted)
        who = scope.get("kiln.identity") or ANONYMOUS
        nonce = self.dashboard.cookie(request, CSRF_COOKIE) or ""
        if not self.dashboard.csrf.valid(nonce, submitted, who.binding):
            raise await self._refuse(
                scope, 403, "Forbidden",
                "CSRF token missing or invalid: reload the page and submit the form again.",
                "csrf")
        return _replay(body, receive)


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _multipart_field(scope: Scope, body: bytes, default: str | None) -> str | None:
    try:
        form = await Request(scope, _replay(body, _disconnected)).form(max_files=0)
    except Exception:  # a malformed body: the handler's own parse says what is wrong
        return default
    value = form.get(CSRF_FIELD)
    return value if isinstance(value, str) else default


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
