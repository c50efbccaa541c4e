"""The dashboard as a Django view: Django's auth decides who gets in, the dashboard
(kiln.web, an ASGI app) answers, on kiln's own event loop thread.

A signed-in user passes when they are active staff, or hold
``KILN["DASHBOARD_PERMISSION"]`` when that is set; anyone else is sent to the login
page (anonymous) or gets a 403. The dashboard then acts as that user (the audit log
names them) and keeps its own CSRF check, so Django's is skipped for it.
"""

from __future__ import annotations

import threading
from http.cookies import SimpleCookie
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from kiln._aio._portal import Portal
from kiln.contrib._identity import with_identity
from kiln.contrib.django._settings import database_url, kiln_settings

_lock = threading.Lock()
_served: dict[str, Any] = {}


def allowed(user: Any) -> bool:
    if not (user.is_authenticated and user.is_active):
        return False
    permission = kiln_settings()["DASHBOARD_PERMISSION"]
    return bool(user.has_perm(permission) if permission else user.is_staff)


def _dashboard() -> tuple[Portal, Any]:
    """One dashboard and one event loop thread for the process, made on first use."""
    with _lock:
        if not _served:
            import kiln.web
            from kiln.cli.worker import load_app

            config = kiln_settings()
            target = load_app(config["APP"]) if config["APP"] else database_url()
            _served["portal"] = Portal("kiln-django-dashboard")
            _served["app"] = kiln.web.create_app(
                target, read_only=bool(config["DASHBOARD_READ_ONLY"]))
        return _served["portal"], _served["app"]


@csrf_exempt  # type: ignore[untyped-decorator]  # django has no stubs
def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    if not allowed(request.user):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        raise PermissionDenied("the kiln dashboard is for staff")
    portal, app = _dashboard()
    root = request.path[: len(request.path) - len(path)].rstrip("/")
    scope = with_identity(_scope(request), request.user, root)
    status, headers, body = portal.run(_call(app, scope, request.body), timeout=60)
    return _response(status, headers, body)


def _scope(request: HttpRequest) -> dict[str, Any]:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in request.headers.items()]
    if "Host" not in request.headers:  # WSGI servers may give SERVER_NAME only
        headers.append((b"host", request.get_host().encode("latin-1")))
    port = int(request.META.get("SERVER_PORT") or (443 if request.is_secure() else 80))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.path.encode(), "query_string": request.META.get(
            "QUERY_STRING", "").encode("latin-1"),
        "headers": headers, "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (request.META.get("SERVER_NAME") or "", port),
    }


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, list[Any], bytes]:
    sent = False
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return int(start["status"]), list(start.get("headers", [])), b"".join(chunks)


def _response(status: int, headers: list[Any], body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name.lower() == "set-cookie":
            response.cookies.load(SimpleCookie(value))
        elif name.lower() != "content-length":
            response[name] = value
    return response
