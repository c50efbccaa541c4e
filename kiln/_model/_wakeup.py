"""The wake-up protocol: what a PostgreSQL NOTIFY or a Bus message carries between
kiln processes. Payloads are written and read with this module's names only.

Channel ``CHANNEL`` carries one payload per message:

- a queue's name: jobs became available in that queue;
- ``scheduled:<unix seconds>`` (``scheduled(at)``): a delayed job was inserted, due then;
- ``CANCEL_PAYLOAD``: running jobs were cancelled; each server asks its store which of
  its own were (kiln._server._canceller);
- ``CONTROLS_PAYLOAD``: a queue control changed; servers read the controls again.

Channel ``STATE`` is a notifier's news about its own connection: ``up`` or ``down``
(messages may have been lost meanwhile, so subscribers look again).

A queue may be named like a control payload (names may hold ``:``), so a reader also
wakes the queue whose name is the payload itself: no queue is left to its poll.
Stores that send NOTIFY in SQL build the payloads from these constants.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

CHANNEL = "kiln"
STATE = "kiln:state"  # payload "up" or "down": the notifier's connection changed
CANCEL_PAYLOAD = "cancel:"  # running jobs were cancelled: their servers look which
CONTROLS_PAYLOAD = "controls:changed"  # a queue control changed
SCHEDULED_PREFIX = "scheduled:"  # followed by the due time in unix seconds


class WakeupKind(enum.Enum):
    QUEUE = "queue"
    SCHEDULED = "scheduled"
    CANCEL = "cancel"
    CONTROLS = "controls"


@dataclass(frozen=True, slots=True)
class Wakeup:
    """One payload read: its kind, and the due time of a ``SCHEDULED`` one."""

    kind: WakeupKind
    at: float = 0.0


def scheduled(at: float) -> str:
    """The payload of a delayed job due at ``at`` (unix seconds)."""
    return f"{SCHEDULED_PREFIX}{at:.6f}"


def parse(payload: str) -> Wakeup:
    """What ``payload`` asks for; anything unrecognised names a queue."""
    if payload == CANCEL_PAYLOAD:
        return Wakeup(WakeupKind.CANCEL)
    if payload == CONTROLS_PAYLOAD:
        return Wakeup(WakeupKind.CONTROLS)
    if payload.startswith(SCHEDULED_PREFIX):
        try:
            return Wakeup(WakeupKind.SCHEDULED, float(payload[len(SCHEDULED_PREFIX):]))
        except ValueError:
            pass
    return Wakeup(WakeupKind.QUEUE)
