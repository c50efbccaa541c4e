"""MySQL/MariaDB plans for queue controls: pause, resume, concurrency limits
(kiln._model._controls).

Each change is one transaction with its audit row; servers learn of it through the Bus
the client publishes on, or within poll_interval. Claims check the pauses themselves
(_jobs.claim).
"""

from __future__ import annotations

from typing import Any

from kiln._model._controls import ALL, QueueControls, from_rows
from kiln.stores._rows import dumps
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Step, Stmt, from_db_required, one, step


def _audited(actor: str, action: str, n: int, detail: dict[str, Any]) -> Step:
    return step(Stmt(
        f"INSERT INTO kiln_audit (at, actor, action, count, detail) VALUES ({NOW}, %s, %s, %s, %s)",
        (actor, action, n, dumps(detail)),
    ), last=True)


def pause(queue: str, actor: str) -> Plan[bool]:
    out = yield step(Stmt(
        "INSERT IGNORE INTO kiln_queue_pauses (queue, paused_at, paused_by)"
        f" VALUES (%s, {NOW}, %s)",
        (queue, actor),
    ), begin=True)
    n = out[0].rowcount
    yield _audited(actor, "queue_pause", n, {"queue": queue})
    return n == 1


def resume(queue: str, actor: str) -> Plan[int]:
    if queue == ALL:
        first = Stmt("DELETE FROM kiln_queue_pauses")
    else:
        first = Stmt("DELETE FROM kiln_queue_pauses WHERE queue = %s", (queue,))
    out = yield step(first, begin=True)
    n = out[0].rowcount
    yield _audited(actor, "queue_resume", n, {"queue": queue})
    return n


def limit_set(queue: str, server_id: str, concurrency: int | None, actor: str) -> Plan[None]:
    if concurrency is None:
        first = Stmt("DELETE FROM kiln_queue_limits WHERE queue = %s AND server_id = %s",
                     (queue, server_id))
    else:
        first = Stmt(
            "INSERT INTO kiln_queue_limits (queue, server_id, concurrency, set_at, set_by)"
            f" VALUES (%s, %s, %s, {NOW}, %s) ON DUPLICATE KEY UPDATE"
            f" concurrency = VALUES(concurrency), set_at = {NOW}, set_by = VALUES(set_by)",
            (queue, server_id, concurrency, actor),
        )
    yield step(first, begin=True)
    detail = {"queue": queue, "server": server_id or None, "concurrency": concurrency}
    yield _audited(actor, "queue_concurrency", 1, detail)


CONTROLS = (
    "SELECT 'p', queue, '', 0, paused_at, paused_by FROM kiln_queue_pauses UNION ALL"
    " SELECT 'l', queue, server_id, concurrency, set_at, set_by FROM kiln_queue_limits"
    " ORDER BY 1 DESC, 2, 3"
)


def controls() -> Plan[QueueControls]:
    """One statement (servers poll it): pauses and limits, padded to one shape."""
    out = yield one(CONTROLS)
    return from_rows(out[0].rows, from_db_required)
