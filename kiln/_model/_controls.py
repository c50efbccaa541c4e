"""Queue controls an operator sets at runtime: pauses and concurrency limits.

Owns their data types, the checks on their input and the rule that turns them into one
server's view (``paused``, ``limit_of``). Kept in the database (kiln_queue_pauses,
kiln_queue_limits), so every server, a restarted or a new one, obeys them; written by
the client (kiln._client._queues), applied by each server's governor (kiln._server._governor). Must
not touch pools or the store itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from kiln._errors import ValidationError
from kiln._model import _validate

ALL = "*"  # pausing or resuming "*" acts on every queue, present and future
FLEET = ""  # the server_id of a limit that holds for every server of its queue
MAX_CONCURRENCY = 10_000  # per server and queue; beyond it a typo, not a plan


class UnknownQueueError(ValidationError):
    """A control names a queue that no registered server serves and no job is in."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        super().__init__(
            f"unknown queue {queue!r}: no registered server serves it and no job is in it"
            " (controls apply to known queues only; nothing was written)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.queue,))


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePause:
    queue: str  # or "*": every queue
    paused_at: datetime  # database clock
    paused_by: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    queue: str
    server_id: str  # FLEET ("") for every server of the queue
    concurrency: int
    set_at: datetime
    set_by: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueControls:
    """Every pause and limit in the database, as one read returns them."""

    pauses: tuple[QueuePause, ...] = ()
    limits: tuple[ConcurrencyLimit, ...] = ()

    def pause_of(self, queue: str) -> QueuePause | None:
        """The pause that holds ``queue``: its own, else the one of "*"."""
        found = {p.queue: p for p in self.pauses}
        return found.get(queue) or found.get(ALL)

    def paused(self, queue: str) -> bool:
        return self.pause_of(queue) is not None

    def limit_of(self, queue: str, server_id: str, configured: int) -> int:
        """A server's concurrency for ``queue``: its own limit, else the fleet's, else
        what it was started with."""
        fleet = None
        for limit in self.limits:
            if limit.queue != queue:
                continue
            if limit.server_id == server_id:
                return limit.concurrency
            if limit.server_id == FLEET:
                fleet = limit.concurrency
        return configured if fleet is None else fleet


def from_rows(rows: Sequence[Sequence[Any]], when: Callable[[Any], datetime]) -> QueueControls:
    """QueueControls from the rows of a store's one controls read: (kind, queue,
    server_id, concurrency, at, by), kind "p" for a pause and "l" for a limit."""
    pauses = tuple(QueuePause(r[1], when(r[4]), r[5]) for r in rows if r[0] == "p")
    limits = tuple(ConcurrencyLimit(r[1], r[2], int(r[3]), when(r[4]), r[5])
                   for r in rows if r[0] == "l")
    return QueueControls(pauses=pauses, limits=limits)


def check_queue(queue: Any, *, wildcard: bool = False) -> str:
    """``queue`` as a name a control may take ("*" only where ``wildcard``)."""
    if wildcard and queue == ALL:
        return ALL
    return _validate.check_name("queue", queue)


def check_concurrency(value: Any) -> int | None:
    """A concurrency for set_concurrency: 0 (claim nothing) to MAX_CONCURRENCY, or None
    (back to the configured value)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"concurrency must be an integer, got {value!r}")
    if not 0 <= value <= MAX_CONCURRENCY:
        raise ValidationError(
            f"concurrency must be between 0 and {MAX_CONCURRENCY}, got {value}"
            " (0 stops the queue's servers claiming; nothing was written)"
        )
    return value


def effective(
    controls: QueueControls, servers: Mapping[str, Mapping[str, int]], queue: str
) -> dict[str, int]:
    """server id -> its concurrency for ``queue``, for the servers that serve it."""
    return {
        sid: controls.limit_of(queue, sid, queues[queue])
        for sid, queues in servers.items() if queue in queues
    }
