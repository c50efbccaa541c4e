"""MySQL/MariaDB plans for queue controls: pause, resume, concurrency limits
(kiln._controls).

Each change is one transaction with its audit row; servers learn of it through the Bus
the client publishes on, or within poll_interval. Claims check the pauses themselves
(_jobs.claim).
"""

from __future__ import annotations

from typing import Any

from kiln._controls import ALL, ConcurrencyLimit, QueueControls, QueuePause
from kiln.stores._rows import dumps
from kiln.stores.mysql._jobs import NOW
from kiln.stores.mysql._plan import Plan, Step, Stmt, from_db_required, step


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


def controls() -> Plan[QueueControls]:
    out = yield step(
        Stmt("SELECT queue, paused_at, paused_by FROM kiln_queue_pauses ORDER BY queue"),
        Stmt("SELECT queue, server_id, concurrency, set_at, set_by FROM kiln_queue_limits"
             " ORDER BY queue, server_id"),
        last=True,
    )
    return QueueControls(
        pauses=tuple(QueuePause(r[0], from_db_required(r[1]), r[2]) for r in out[0].rows),
        limits=tuple(
            ConcurrencyLimit(r[0], r[1], int(r[2]), from_db_required(r[3]), r[4])
            for r in out[1].rows
        ),
    )
