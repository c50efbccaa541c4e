"""The audit log page: entries newest first, filtered by action (exactly), actor
(containing the text), time (since/until: an age such as 2h or an ISO 8601 time) and
paged by id (``before``: older entries than the last one shown).

Owns reading the page's parameters into one store read (kiln._model._job.AuditQuery)
and the page. A relative time is pinned to the time it meant in the next-page link, so
paging does not slide the range. Bad input is a 400 naming the parameter.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from kiln.web import _params
from kiln.web._dashboard import Dashboard
from kiln.web._params import BadRequest

DEFAULT_LIMIT = 100
# what the dashboard, the Client and the queue controls write; the field suggests them
KNOWN_ACTIONS = ("requeue", "cancel", "delete", "queue_pause", "queue_resume",
                 "queue_concurrency", "server-quiet", "server-wake", "login", "login-failed",
                 "logout", "refused")


@dataclasses.dataclass(frozen=True, slots=True)
class AuditFilter:
    action: str | None = None
    actor: str | None = None
    since: str | None = None
    until: str | None = None
    before: int | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, request: Request) -> AuditFilter:
        params = request.query_params
        found = cls(
            action=_params.text(params, "action"), actor=_params.text(params, "actor"),
            since=_params.moment(params, "since"), until=_params.moment(params, "until"),
            before=_params.integer(params, "before", None, 1, _params.MAX_ID),
            limit=_params.integer(params, "limit", DEFAULT_LIMIT, 1, _params.MAX_LIMIT)
            or DEFAULT_LIMIT,
        )
        if found.since is not None and found.until is not None \
                and _params.at(found.since, "since") >= _params.at(found.until, "until"):
            raise BadRequest(f"since ({found.since}) is not before until ({found.until}): "
                             "nothing can match")
        return found

    @property
    def filtered(self) -> bool:
        return any(v is not None for v in (self.action, self.actor, self.since, self.until))

    def query(self, **changes: object) -> str:
        values = {"action": self.action, "actor": self.actor, "since": self.since,
                  "until": self.until, "before": self.before,
                  "limit": None if self.limit == DEFAULT_LIMIT else self.limit, **changes}
        return urlencode([(k, str(v)) for k, v in values.items() if v is not None])

    def next_page(self, last_id: int) -> str:
        """The older page's query, its relative times pinned to the times they meant."""
        def pinned(raw: str | None, name: str) -> str | None:
            return None if raw is None else _params.at(raw, name).isoformat()

        return self.query(since=pinned(self.since, "since"),
                          until=pinned(self.until, "until"), before=last_id)


async def audit(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    f = AuditFilter.parse(request)
    client = await dashboard.source.client()
    entries = await client.audit(
        f.limit + 1, action=f.action, actor=f.actor,
        since=None if f.since is None else _params.at(f.since, "since"),
        until=None if f.until is None else _params.at(f.until, "until"), before=f.before)
    more = len(entries) > f.limit
    entries = entries[:f.limit]
    return dashboard.render(
        request, "audit.html", title="Audit log", nav="audit", entries=entries, f=f,
        known_actions=KNOWN_ACTIONS,
        older=f.next_page(entries[-1].id) if more and entries else None,
        newest=f.query(before=None) if f.before is not None else None,
    )
