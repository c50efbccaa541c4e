"""Queue controls on the dashboard's queues page: pause, resume, set concurrency.

Owns the one state-changing handler of the queues page. It checks the CSRF token,
makes exactly one Client call (pause_queue, resume_queue or set_concurrency, whose
store write carries the audit entry: who, what, when) and redirects (303) back to the
queues page, which says what happened. The buttons ask for a confirmation in the
browser first (data-confirm). Read-only mode never reaches it (the Guard).
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from kiln._errors import ValidationError
from kiln.web._actions import actor_of
from kiln.web._dashboard import Dashboard
from kiln.web._params import BadRequest

ACTIONS = ("pause", "resume", "concurrency")


def _concurrency(fields: Mapping[str, str]) -> int | None:
    text = fields.get("concurrency", "").strip()
    if text in ("", "reset"):
        return None
    try:
        return int(text)
    except ValueError:
        raise ValidationError(f"concurrency must be a whole number, got {text[:40]!r};"
                              " nothing was written") from None


async def control(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    action, queue = fields.get("action", ""), fields.get("queue", "")
    if action not in ACTIONS:
        raise BadRequest(f"unknown action {action[:40]!r}: use pause, resume or concurrency")
    client = await dashboard.source.client()
    actor = actor_of(request)
    if action == "pause":
        n = int(await client.pause_queue(queue, actor=actor))
    elif action == "resume":
        n = await client.resume_queue(queue, actor=actor)
    else:
        server = fields.get("server") or None
        await client.set_concurrency(queue, _concurrency(fields), server=server, actor=actor)
        n = 1
    return dashboard.redirect(request, "/queues", f"done={action}&n={n}")


def flash_of(params: Mapping[str, str]) -> str | None:
    """What the last control did (fixed wording, nothing echoed from the request)."""
    done, n = params.get("done"), params.get("n")
    if done == "pause":
        return "Paused: its servers claim nothing more; running jobs finish." if n == "1" \
            else "Already paused: nothing changed."
    if done == "resume":
        return "Resumed: its servers claim again." if n not in (None, "0") \
            else "Not paused: nothing changed."
    if done == "concurrency":
        return "Concurrency changed: every server applies it within one notification."
    return None
