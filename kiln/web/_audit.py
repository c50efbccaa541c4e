"""The dashboard's audit entries: who (the token's name or the user) and from where.

Owns the actor string, ``dashboard:<user>@<address>`` (the address is the client's,
as kiln.web's trusted-proxy setting resolves it), and the entries the dashboard
writes itself: sign-ins, failed sign-ins, sign-outs and refused requests. Job actions
are audited by kiln.Client. A failing audit write is logged, never turned into an
error page for the request it describes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.types import Scope

from kiln._model._job import JSON
from kiln.web._auth import ANONYMOUS, Identity

if TYPE_CHECKING:
    from kiln.web._dashboard import Dashboard

log = logging.getLogger("kiln.web")


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def actor_of(scope: Scope) -> str:
    """Who acted, as the audit log records it: the signed-in user and their address."""
    who = scope.get("kiln.identity")
    user = who.user if isinstance(who, Identity) else ANONYMOUS.user
    return f"dashboard:{user}@{client_address(scope)}"


async def record(dashboard: Dashboard, scope: Scope, action: str,
                 detail: dict[str, JSON]) -> None:
    """One entry by the dashboard itself (count 0: no job changed)."""
    path = str(scope.get("path", ""))[:200]
    try:
        client = await dashboard.source.client()
        await client.record_audit(actor_of(scope), action, 0,
                                 {"path": path, "method": str(scope.get("method", "")),
                                  **detail})
    except Exception as exc:  # the refusal or sign-in still gets its answer
        log.warning("dashboard: could not write the audit entry %s for %s: %s",
                    action, actor_of(scope), exc)
