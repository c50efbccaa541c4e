"""Queue controls on the dashboard's queues page: pause, resume, set concurrency.

Owns the one state-changing handler of the queues page. It checks the CSRF token,
makes exactly one Client call (pause_queue, resume_queue or set_concurrency, whose
store write carries the audit entry: who, what, when) and redirects (303) back to the
queues page, which says what happened. Bad input (an unknown queue or server, a
concurrency out of range) writes nothing and shows the queues page again with the
error above the table (400). The buttons ask for a confirmation in the browser first
(data-confirm). Read-only mode never reaches it (the Guard).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from kiln._errors import ValidationError
from kiln.web import _queues_page
from kiln.web._actions import actor_of
from kiln.web._dashboard import Dashboard
from kiln.web._params import BadRequest

ACTIONS = ("pause", "resume", "concurrency")
CONCURRENCY = re.compile(r"-?[0-9]{1,9}")


def _concurrency(fields: Mapping[str, str]) -> int | None:
    text = fields.get("concurrency", "").strip()
    if text in ("", "reset"):
        return None
    if not CONCURRENCY.fullmatch(text):  # ASCII digits: int() reads "1_0", full-width ones
        raise ValidationError(f"concurrency must be a whole number, got {text[:40]!r};"
                              " nothing was written")
    return int(text)


async def control(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    action, queue = fields.get("action", ""), fields.get("queue", "")
    if action not in ACTIONS:
        raise BadRequest(f"unknown action {action[:40]!r}: use pause, resume or concurrency")
    try:
        n = await _apply(request, dashboard, action, queue, fields)
    except ValidationError as exc:
        return await _queues_page.render(request, error=str(exc), status=400)
    return dashboard.redirect(request, "/queues", f"done={action}&n={n}")


async def _apply(request: Request, dashboard: Dashboard, action: str, queue: str,
                 fields: Mapping[str, str]) -> int:
    client = await dashboard.source.client()
    actor = actor_of(request)
    if action == "pause":
        return int(await client.pause_queue(queue, actor=actor))
    if action == "resume":
        return await client.resume_queue(queue, actor=actor)
    server = fields.get("server") or None
    await client.set_concurrency(queue, _concurrency(fields), server=server, actor=actor)
    return 1
