"""Quiet a server from the dashboard's servers page: it stops claiming, finishes what
it runs and stays registered (Sidekiq's "quiet"), and can be woken again.

Quiet is no new mechanism: it is a per-server concurrency of 0 on every queue the
server serves (``Client.set_concurrency(queue, 0, server=id)``), the control row each
server's governor polls like a pause, written and audited (who, what, when) by the
store like every queue control. Waking sets those limits back to the configured
value (None). A server that is quiet on every queue shows as quiet. Bad input (an
unknown server) writes nothing and shows the servers page again with the error (400).
Read-only mode never reaches it (the Guard).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from kiln._errors import ValidationError
from kiln.web import _pages
from kiln.web._audit import actor_of
from kiln.web._dashboard import Dashboard
from kiln.web._params import BadRequest

ACTIONS = {"quiet": 0, "wake": None}


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
    try:
        for queue in sorted(server.queues):
            await client.set_concurrency(queue, ACTIONS[action], server=server.id,
                                         actor=actor_of(request.scope))
    except ValidationError as exc:
        return await _pages.render_servers(request, error=str(exc), status=400)
    return dashboard.redirect(request, "/servers", f"done={action}&n={len(server.queues)}")
