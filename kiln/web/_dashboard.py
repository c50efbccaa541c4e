"""Dashboard: what every page handler shares, and how a page is rendered.

Owns the per-application state (source, auth, CSRF, options), the Jinja environment
(autoescape always on) and the response headers of every page. Handlers reach it as
``request.app.state.kiln``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from markupsafe import Markup
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from kiln._client._bulk import BATCH
from kiln._model._job import KIND_COUNT_CAP, JobState
from kiln._model._printable import escape
from kiln._version import VERSION
from kiln.web._auth import ANONYMOUS, Auth, Identity
from kiln.web._bulk_runs import BulkRuns
from kiln.web._csrf import CSRF_COOKIE, CSRF_FIELD, CSRF_HEADER, Csrf
from kiln.web._hosts import AllowedHosts
from kiln.web._sessions import Sessions
from kiln.web._source import Source
from kiln.web._throttle import Throttle
from kiln.web._timings import short_duration

HERE = Path(__file__).parent
NEW_NONCE = "kiln.csrf_nonce"  # scope key: a nonce made for this response
MAX_FIELDS = 1100  # a selection of up to 1000 jobs plus the filter fields
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
STATE_ORDER: tuple[JobState, ...] = (
    JobState.AVAILABLE, JobState.RUNNING, JobState.SCHEDULED, JobState.PENDING,
    JobState.AWAITING, JobState.FAILED, JobState.CANCELLED, JobState.COMPLETED,
)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _when(value: datetime | float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(value: datetime | float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).isoformat()


def _clock(value: datetime | float) -> str:
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%H:%M:%S UTC")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _duration(seconds: float | None) -> str:
    """A wait or a run time: milliseconds under a second, else as ages are written."""
    if seconds is not None and seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return _age(seconds)


def _compact(value: Any, length: int = 80) -> str:
    """A JSON value on one line, cut to ``length`` characters (a list's preview)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str,
                      separators=(",", ":"))
    return _short(text, length)


def _short(value: Any, length: int = 120) -> str:
    text = str(value)
    return text if len(text) <= length else text[: length - 1] + "…"


VALUE_LIMIT = 65_536  # characters of a JSON value a job page shows before "show all"
REFRESH_CHOICES = ("2", "5", "15", "60")  # seconds an operator may pick (and off)
SHOWN_AS_IS = "\n\t"  # a traceback's lines and indents stay as they are


def shown(value: Any) -> Any:
    """Every ``{{ value }}`` of every template passes here (the environment's finalize):
    a text with control, format or separator characters (bidi overrides, zero-width
    characters, ESC, NUL) comes out escaped as the CLI prints it (kiln._model._printable)
    and each escape marked (``<mark class=ctl>``, the code point on hover), so nothing
    rearranges or hides what is around it. Markup (macros, ``field``) passes as is.
    The mark has no quote, so it stays inert text inside an attribute, too."""
    if not isinstance(value, str) or isinstance(value, Markup) or value.isprintable():
        return value
    out = []
    for char in value:
        if char.isprintable() or char in SHOWN_AS_IS:
            out.append(char)
        else:
            out.append(f"\0{ord(char):04X}\0{escape(char)}\0")
    # every NUL of the text became an escape above: the NULs left are separators, and
    # parts are text, code point, escape, text, ...
    parts = str(markupsafe.escape("".join(out))).split("\0")
    html = []
    for i in range(0, len(parts), 3):
        html.append(parts[i])
        if i + 2 < len(parts):
            html.append(f"<mark class=ctl title=U+{parts[i + 1]}>{parts[i + 2]}</mark>")
    return Markup("".join(html))


def cut_value(text: str, limit: int = VALUE_LIMIT) -> str:
    """A long JSON text cut to ``limit`` characters, the cut marked."""
    return text if len(text) <= limit else text[:limit] + "\n… [cut: show all below]"


def field(value: Any) -> Markup:
    """A form field's value exactly as given (HTML-escaped, not ``shown``): a filter
    must post back the very text it was given."""
    return Markup(markupsafe.escape("" if value is None else value))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        finalize=shown,
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pretty=_pretty, when=_when, iso=_iso, age=_age, duration=_duration,
                       short=_short, compact=_compact, limit=short_duration, clock=_clock,
                       field=field, cut_value=cut_value)
    env.globals.update(STATES=STATE_ORDER, VERSION=VERSION, VALUE_LIMIT=VALUE_LIMIT,
                       KIND_COUNT_CAP=KIND_COUNT_CAP, inf=float("inf"))
    return env


def identity(request: Request) -> Identity:
    """Who the request acts as (the Guard sets it before any handler runs)."""
    who = request.scope.get("kiln.identity")
    return who if isinstance(who, Identity) else ANONYMOUS


@dataclasses.dataclass
class Dashboard:
    source: Source
    auth: Auth
    csrf: Csrf
    read_only: bool
    root_path: str
    dead_after: float
    hosts: AllowedHosts = dataclasses.field(default_factory=AllowedHosts)
    throttle: Throttle = dataclasses.field(default_factory=Throttle)
    sessions: Sessions = dataclasses.field(init=False)
    refresh_interval: float = 5.0  # seconds between auto-refreshes of live pages
    # "all matching" actions: jobs per batch, and how long a confirmation waits for its
    # run before it redirects to the run's progress page instead (kiln.web._bulk_runs)
    bulk_batch: int = BATCH
    bulk_wait: float = 2.0
    bulk_runs: BulkRuns = dataclasses.field(default_factory=BulkRuns)
    env: jinja2.Environment = dataclasses.field(default_factory=environment)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.auth)

    def base(self, request: Request) -> str:
        """The URL prefix of this dashboard: the configured root path, then any mount."""
        return self.root_path + str(request.scope.get("root_path", ""))

    def url(self, request: Request, path: str, query: str = "") -> str:
        return self.base(request) + path + (f"?{query}" if query else "")

    def redirect(self, request: Request, path: str, query: str = "") -> RedirectResponse:
        return RedirectResponse(self.url(request, path, query), status_code=303)

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        values: dict[str, Any] = {"nav": "", "refresh": False, "flash": None, "as_of": {},
                                  **context}
        who = identity(request)
        html = self.env.get_template(template).render(
            request=request,
            base=self.base(request),
            csrf_token=self.csrf_token(request),
            read_only=self.read_only,
            user=who.user,
            logged_in_by_cookie=who.via == "session",
            now=time.time(),
            refresh_seconds=f"{self.refresh_interval:g}",
            refresh_choices=sorted({*REFRESH_CHOICES, f"{self.refresh_interval:g}"}, key=float),
            **values,
        )
        return HTMLResponse(html, status_code=status)

    def csrf_token(self, request: Request) -> str:
        """The CSRF token a state-changing request from this client must carry (form
        field ``csrf`` or header ``X-CSRF-Token``), for a page or a JSON answer alike.
        A client without a nonce cookie gets one with this response (the Guard sets it)."""
        nonce = self.cookie(request, CSRF_COOKIE)
        if nonce is None or len(nonce) < 16:
            nonce = request.scope.get(NEW_NONCE) or Csrf.new_nonce()
            request.scope[NEW_NONCE] = nonce
        return self.csrf.token_for(nonce, identity(request).binding)

    def nonce_cookie(self, request: Request) -> tuple[bytes, bytes] | None:
        """The Set-Cookie header for a nonce csrf_token() made up, if it did."""
        nonce = request.scope.get(NEW_NONCE)
        if not isinstance(nonce, str):
            return None
        holder = Response()
        self.set_cookie(request, holder, CSRF_COOKIE, nonce, max_age=None)
        return next(h for h in holder.raw_headers if h[0] == b"set-cookie")

    async def form(self, request: Request) -> FormData:
        """The posted form, once its CSRF token has been checked (403 otherwise)."""
        form = await request.form(max_files=0, max_fields=MAX_FIELDS)
        submitted = form.get(CSRF_FIELD)
        if not isinstance(submitted, str):
            submitted = request.headers.get(CSRF_HEADER)
        if not self.csrf.valid(self.cookie(request, CSRF_COOKIE) or "", submitted,
                               identity(request).binding):
            raise HTTPException(
                403, "CSRF token missing or invalid: reload the page and submit the form again."
            )
        return form

    def set_cookie(
        self, request: Request, response: Response, name: str, value: str,
        max_age: int | None,
    ) -> None:
        response.set_cookie(
            self.cookie_name(request, name), value, max_age=max_age,
            path=self.base(request) or "/", httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )

    def delete_cookie(self, request: Request, response: Response, name: str) -> None:
        response.delete_cookie(
            self.cookie_name(request, name), path=self.base(request) or "/", httponly=True,
            samesite="strict", secure=request.url.scheme == "https",
        )

    def cookie_name(self, request: Request, name: str) -> str:
        """The cookie's name as this request's scheme and path want it. Over https the
        name carries the prefix browsers enforce: ``__Host-`` (Secure, Path=/, no Domain:
        no sub-domain or plain-http page can plant or overwrite it) when the dashboard
        is served at /, ``__Secure-`` under a path prefix (``__Host-`` requires Path=/).
        Plain http (loopback, development) keeps the bare name: browsers refuse a
        prefixed cookie that is not Secure."""
        if request.url.scheme != "https":
            return name
        return ("__Secure-" if self.base(request) else "__Host-") + name

    def cookie(self, request: Request, name: str) -> str | None:
        """The value of the dashboard's cookie ``name`` (under its prefixed name over https)."""
        return request.cookies.get(self.cookie_name(request, name))
