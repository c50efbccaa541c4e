"""Jobs no live server can claim: available in a queue where no live server handles
their kind (docs/operating.md, "What happens to jobs in flight when a declaration
changes between deploys").

A server claims the jobs of the kinds it has handlers for, in the queues it serves. An
available job outside every live server's (queue, kind) pairs waits for a server that
may never come: its kind was enqueued before any server declared it (``declared``
False: no server ever published it), moved to another queue by a deploy, removed, or
misspelt. A paused queue still counts as handled: that wait is deliberate. Owns the
rule; reads only (the available jobs by queue and kind, the servers, the published
kinds).
"""

from __future__ import annotations

import dataclasses

from kiln._model._job import DEAD_AFTER
from kiln.stores import Store


@dataclasses.dataclass(frozen=True, slots=True)
class Unhandled:
    """Available jobs of ``kind`` in ``queue`` that no live server handles there."""

    queue: str
    kind: str
    jobs: int
    declared: bool  # some server published the kind (``kiln kinds``); False: none ever did


async def unhandled(store: Store, dead_after: float = DEAD_AFTER,
                    cap: int | None = None) -> list[Unhandled]:
    """By queue then kind. A server is live while its heartbeat is younger than
    ``dead_after`` (your ServerConfig.dead_after). ``cap``: as Client.counts (jobs
    above it estimated)."""
    handled = {
        (queue, kind)
        for server in await store.server_list()
        if server.heartbeat_age is not None and server.heartbeat_age <= dead_after
        for queue in server.queues for kind in server.kinds
    }
    waiting = [(q, k, n) for q, k, n in await store.jobs_available_by_kind(cap)
               if (q, k) not in handled]
    if not waiting:
        return []
    published = {p.declaration.kind for p in await store.kinds_list()}
    return [Unhandled(queue=q, kind=k, jobs=n, declared=k in published)
            for q, k, n in sorted(waiting)]
