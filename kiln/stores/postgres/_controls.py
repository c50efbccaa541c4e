"""PostgreSQL plans for queue controls: pause, resume, concurrency limits (kiln._model._controls).

Each change is one transaction with its audit row and a NOTIFY, so every listening
server re-reads the controls at once. Claims check the pauses themselves (_jobs.CLAIM).
"""

from __future__ import annotations

from typing import Any

from kiln._model._controls import ALL, QueueControls, from_rows
from kiln._model._wakeup import CHANNEL, CONTROLS_PAYLOAD
from kiln.stores._rows import dumps
from kiln.stores.postgres._plan import Plan, Step, Stmt, one, step

_AUDIT = "INSERT INTO kiln_audit (actor, action, count, detail) VALUES (%s, %s, %s, %s::jsonb)"
_NOTIFY = Stmt(f"SELECT pg_notify('{CHANNEL}', '{CONTROLS_PAYLOAD}')")


def _audited(actor: str, action: str, n: int, detail: dict[str, Any]) -> Step:
    return step(Stmt(_AUDIT, (actor, action, n, dumps(detail))), _NOTIFY, last=True)


def pause(queue: str, actor: str) -> Plan[bool]:
    rows = (yield step(Stmt(
        "INSERT INTO kiln_queue_pauses (queue, paused_by) VALUES (%s, %s)"
        " ON CONFLICT (queue) DO NOTHING RETURNING 1", (queue, actor),
    )))[0]
    yield _audited(actor, "queue_pause", len(rows), {"queue": queue})
    return bool(rows)


def resume(queue: str, actor: str) -> Plan[int]:
    if queue == ALL:
        first = Stmt("DELETE FROM kiln_queue_pauses RETURNING 1")
    else:
        first = Stmt("DELETE FROM kiln_queue_pauses WHERE queue = %s RETURNING 1", (queue,))
    rows = (yield step(first))[0]
    yield _audited(actor, "queue_resume", len(rows), {"queue": queue})
    return len(rows)


def limit_set(queue: str, server_id: str, concurrency: int | None, actor: str) -> Plan[None]:
    if concurrency is None:
        first = Stmt("DELETE FROM kiln_queue_limits WHERE queue = %s AND server_id = %s",
                     (queue, server_id))
    else:
        first = Stmt(
            "INSERT INTO kiln_queue_limits (queue, server_id, concurrency, set_by)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (queue, server_id) DO UPDATE SET"
            " concurrency = excluded.concurrency, set_at = now(), set_by = excluded.set_by",
            (queue, server_id, concurrency, actor),
        )
    yield step(first)
    detail = {"queue": queue, "server": server_id or None, "concurrency": concurrency}
    yield _audited(actor, "queue_concurrency", 1, detail)


CONTROLS = (
    "SELECT 'p', queue, '', 0, paused_at, paused_by FROM kiln_queue_pauses UNION ALL"
    " SELECT 'l', queue, server_id, concurrency, set_at, set_by FROM kiln_queue_limits"
    " ORDER BY 1 DESC, 2, 3"
)


def controls() -> Plan[QueueControls]:
    """One statement (servers poll it): pauses and limits, padded to one shape."""
    rows = (yield one(CONTROLS))[0]
    return from_rows(rows, lambda at: at)

