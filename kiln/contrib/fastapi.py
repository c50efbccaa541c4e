"""kiln in a FastAPI application: the client's lifespan, the dashboard under a prefix
behind the application's own auth dependency.

``mount_dashboard(api, "/admin/kiln", dashboard, user=current_admin)`` adds routes
under the prefix whose only dependency is ``user``, any FastAPI dependency (with its
own sub-dependencies, security schemes and HTTPExceptions): a request that gets past
it is forwarded to the dashboard as that user; one it refuses never reaches it.
"""

# no ``from __future__ import annotations``: FastAPI reads the routes' annotations at
# run time, and ``Who`` below is local to mount_dashboard

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kiln._errors import ConfigError
from kiln.contrib._identity import with_identity
from kiln.contrib.starlette import lifespan, open_client

METHODS = ["GET", "HEAD", "POST"]


class _Forward(Response):
    """Answers by handing the request, as it came, to the dashboard."""

    def __init__(self, dashboard: ASGIApp, root_path: str, user: Any) -> None:
        super().__init__()
        self.dashboard, self.root_path, self.user = dashboard, root_path, user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        child = with_identity(dict(scope), self.user, self.root_path)
        await self.dashboard(child, receive, send)


def mount_dashboard(api: FastAPI, prefix: str, dashboard: ASGIApp, *, user: Any) -> None:
    """Serve ``dashboard`` under ``prefix`` (``/admin/kiln``) to whoever ``user`` (a
    FastAPI dependency) lets through; what it returns names who acts."""
    if not prefix.startswith("/") or prefix.endswith("/"):
        raise ConfigError("prefix", prefix, "use a path like /admin/kiln (no trailing slash)")

    Who = Annotated[Any, Depends(user)]

    async def forward(request: Request, who: Who) -> Response:
        if who is None or who is False:
            return PlainTextResponse("Forbidden", status_code=403)
        root = request.scope.get("root_path", "") + prefix
        return _Forward(dashboard, root, who)

    async def slash(request: Request, who: Who) -> Response:
        return RedirectResponse(request.scope.get("root_path", "") + prefix + "/")

    api.add_api_route(prefix, slash, methods=["GET", "HEAD"], include_in_schema=False)
    api.add_api_route(prefix + "/{path:path}", forward, methods=METHODS,
                      include_in_schema=False)


__all__ = ["lifespan", "mount_dashboard", "open_client"]
