"""Queue controls from the operator's side: pause, resume, set concurrency, remove a
fleet-wide limit, and the overview ``kiln queues`` prints (Client delegates here; so do
the CLI and dashboard).

A control names a known queue: one that a registered server serves, or that holds
jobs, or that already has a control. Anything else is an UnknownQueueError and
nothing is written: a typo must not create a queue, nor leave the real one running.
Every change is audited by the store in its own transaction, then announced on the
Bus (PostgreSQL announces it itself), so every server applies it within one
notification, or within poll_interval without one (kiln._server._governor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kiln._client._bus import Bus
from kiln._errors import ValidationError
from kiln._model._concurrency import queue_group
from kiln._model._controls import (
    ALL,
    FLEET,
    QueueControls,
    QueuePause,
    UnknownQueueError,
    check_concurrency,
    check_queue,
    effective,
)
from kiln._model._job import ServerInfo
from kiln._model._wakeup import CONTROLS_PAYLOAD
from kiln.stores import Store


@dataclasses.dataclass(frozen=True, slots=True)
class QueueState:
    """One queue as ``kiln queues`` and the dashboard show it."""

    queue: str
    pause: QueuePause | None  # what holds it paused ("*" or its own), if anything
    concurrency: dict[str, int]  # server id -> its concurrency now, per serving server
    configured: dict[str, int]  # server id -> what it was started with
    counts: dict[str, int]  # state -> jobs

    @property
    def paused(self) -> bool:
        return self.pause is not None


@dataclasses.dataclass(frozen=True, slots=True)
class LimitRemoved:
    """What ``remove_limit`` removed: the queue's fleet-wide limit, and who declared it."""

    queue: str
    max: int | None  # the limit it had; None: the queue had none
    declared_by: list[str]  # servers that had declared it ("": a kiln before version 12)
    live: list[str]  # of those, the ones registered now: each declares it again at its start


async def known_queues(store: Store) -> set[str]:
    servers = await store.server_list()
    counts = await store.job_counts()
    controls = await store.queue_controls()
    return ({q for s in servers for q in s.queues} | {c.queue for c in counts}
            | {p.queue for p in controls.pauses} | {lim.queue for lim in controls.limits})


async def _known(store: Store, queue: str) -> None:
    if queue != ALL and queue not in await known_queues(store):
        raise UnknownQueueError(queue)


async def announce(store: Store, bus: Bus | None) -> None:
    if bus is not None:
        await bus.publish(CONTROLS_PAYLOAD)


async def pause(store: Store, bus: Bus | None, queue: str, actor: str) -> bool:
    queue = check_queue(queue, wildcard=True)
    await _known(store, queue)
    changed = await store.queue_pause(queue, actor)
    await announce(store, bus)
    return changed


async def resume(store: Store, bus: Bus | None, queue: str, actor: str) -> int:
    queue = check_queue(queue, wildcard=True)
    await _known(store, queue)
    lifted = await store.queue_resume(queue, actor)
    await announce(store, bus)
    return lifted


async def set_concurrency(
    store: Store, bus: Bus | None, queue: str, concurrency: int | None,
    server: str | None, actor: str,
) -> None:
    queue = check_queue(queue)
    n = check_concurrency(concurrency)
    if server is not None:
        if not isinstance(server, str) or not server:
            raise ValidationError(f"server must be a registered server's id, got {server!r}")
        servers = {s.id: s for s in await store.server_list()}
        if server not in servers:
            raise ValidationError(f"server {server!r} is not registered (see kiln servers);"
                                  " nothing was written")
        if queue not in servers[server].queues:
            raise ValidationError(f"server {server!r} does not serve queue {queue!r};"
                                  " nothing was written")
    else:
        await _known(store, queue)
    await store.queue_limit_set(queue, server or FLEET, n, actor)
    await announce(store, bus)


async def remove_limit(store: Store, queue: str, actor: str) -> LimitRemoved:
    """Remove ``queue``'s fleet-wide concurrency limit (app.queue_concurrency), audited.
    Claims obey no limit from the commit on; a server that still declares it puts it
    back when it starts (or rejoins)."""
    queue = check_queue(queue)
    found, servers = await store.concurrency_remove(queue_group(queue), actor)
    registered = {s.id for s in await store.server_list()}
    return LimitRemoved(queue, found, servers, [s for s in servers if s in registered])


def overview(
    servers: Sequence[ServerInfo], controls: QueueControls, counts: dict[str, dict[str, int]]
) -> list[QueueState]:
    by_server = {s.id: s.queues for s in servers}
    names = sorted({q for s in servers for q in s.queues} | set(counts)
                   | {p.queue for p in controls.pauses if p.queue != ALL}
                   | {lim.queue for lim in controls.limits})
    return [
        QueueState(
            queue=q, pause=controls.pause_of(q), concurrency=effective(controls, by_server, q),
            configured={sid: qs[q] for sid, qs in by_server.items() if q in qs},
            counts=dict(counts.get(q, {})),
        )
        for q in names
    ]


async def states(store: Store) -> list[QueueState]:
    counts: dict[str, dict[str, int]] = {}
    for c in await store.job_counts():
        counts.setdefault(c.queue, {})[c.state.value] = c.count
    return overview(await store.server_list(), await store.queue_controls(), counts)
