"""Quiet a server from the dashboard's servers page: it stops claiming, finishes what
it runs and stays registered (Sidekiq's "quiet"), and can be woken again.

Quiet is no new mechanism: it is a per-server concurrency of 0 on every queue the
server serves (``Client.set_concurrency(queue, 0, server=id)``), the control row each
server's governor polls like a pause, written and audited (who, what, when) by the
store like every queue control. The dashboard also audits the action itself:
``server-quiet`` with the per-server limits the server had before (``before``, a queue
-> limit map, null where it had none of its own), ``server-wake`` with what it
restored. Waking puts those limits back, read from the newest ``server-quiet`` entry
of that server in the audit log (the database: a restarted dashboard, or another
replica, finds it too); a queue whose limit someone changed since (no longer 0) is
left alone, and a server quieted some other way goes back to its configured value.
Quieting a quiet server writes nothing. Bad input (an unknown server) writes nothing
and shows the servers page again with the error (400). Read-only mode never reaches
it (the Guard).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from kiln._client._client import Client
from kiln._errors import ValidationError
from kiln._model._job import JSON, AuditEntry, ServerInfo
from kiln.web import _audit, _pages
from kiln.web._audit import actor_of
from kiln.web._dashboard import Dashboard
from kiln.web._params import BadRequest

ACTIONS = ("quiet", "wake")
QUIET, WAKE = "server-quiet", "server-wake"
SCAN_PAGES = 20  # pages of 100 audit entries searched for a server's last quiet


async def control(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    action, server_id = str(form.get("action", "")), str(form.get("server", ""))
    if action not in ACTIONS:
        raise BadRequest(f"unknown action {action[:40]!r}: use quiet or wake")
    client = await dashboard.source.client()
    servers = {s.id: s for s in await client.servers()}
    server = servers.get(server_id)
    if server is None:
        return await _pages.render_servers(
            request, error=f"server {server_id[:200]!r} is not registered; nothing was written",
            status=400)
    own = await own_limits(client, server)
    try:
        if action == "quiet":
            n = await _quiet(dashboard, request, client, server, own)
        else:
            n = await _wake(dashboard, request, client, server, own)
    except ValidationError as exc:
        return await _pages.render_servers(request, error=str(exc), status=400)
    return dashboard.redirect(request, "/servers", f"done={action}&n={n}")


async def own_limits(client: Client, server: ServerInfo) -> dict[str, int | None]:
    """The server's own per-server limit of each of its queues (None: none of its own)."""
    controls = await client.queue_controls()
    mine = {lim.queue: lim.concurrency for lim in controls.limits if lim.server_id == server.id}
    return {q: mine.get(q) for q in sorted(server.queues)}


async def _quiet(dashboard: Dashboard, request: Request, client: Client, server: ServerInfo,
                 own: dict[str, int | None]) -> int:
    if own and all(v == 0 for v in own.values()):
        return 0  # quiet already: writing would lose the limits its last quiet kept
    for queue in own:
        await client.set_concurrency(queue, 0, server=server.id, actor=actor_of(request.scope))
    before: dict[str, JSON] = dict(own)
    await _audit.record(dashboard, request.scope, QUIET,
                        {"server": server.id, "before": before})
    return len(own)


async def _wake(dashboard: Dashboard, request: Request, client: Client, server: ServerInfo,
                own: dict[str, int | None]) -> int:
    before = await last_quiet(client, server.id)
    restored: dict[str, JSON] = {}
    for queue, limit in own.items():
        if limit != 0:
            continue  # not held by the quiet (never quieted, or changed since)
        value = before.get(queue)
        back = value if isinstance(value, int) and not isinstance(value, bool) else None
        await client.set_concurrency(queue, back, server=server.id,
                                     actor=actor_of(request.scope))
        restored[queue] = back
    await _audit.record(dashboard, request.scope, WAKE,
                        {"server": server.id, "restored": restored})
    return len(restored)


async def last_quiet(client: Client, server_id: str) -> dict[str, JSON]:
    """The limits the newest ``server-quiet`` of ``server_id`` kept, if no
    ``server-wake`` of it came after; else {} (back to the configured values)."""
    quiet, wake = await _newest(client, QUIET, server_id), await _newest(client, WAKE, server_id)
    if quiet is None or (wake is not None and wake.id > quiet.id):
        return {}
    kept = quiet.detail.get("before")
    return kept if isinstance(kept, dict) else {}


async def _newest(client: Client, action: str, server_id: str) -> AuditEntry | None:
    before: int | None = None
    for _ in range(SCAN_PAGES):
        page = await client.audit(100, action=action, actor="dashboard:", before=before)
        for entry in page:
            if entry.detail.get("server") == server_id:
                return entry
        if len(page) < 100:
            return None
        before = page[-1].id
    return None
