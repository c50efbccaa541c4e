"""What a kind's published declaration does to the jobs that wait (docs/operating.md,
"What happens to jobs in flight when a declaration changes between deploys").

Two cases, both applied by the server whose declaration of the kind is in use
(kiln._server.maintenance.adopter):

- **Adoption.** A producer that holds no declaration of a kind (no handler, nothing
  published yet) enqueues with the defaults, and marks each option it did not give
  (``DEFAULTED`` bits, stored with the job). Once a server publishes the kind, those
  options follow its declaration: queue, max_attempts, priority, timeout, tags, rate
  limit and concurrency limit. A unique job keeps what it was enqueued with (its key
  may hold its queue).
- **Keys.** A job's concurrency key follows the declaration in use: the jobs of a kind
  whose limit was removed lose theirs (the store, ``jobs_unkey``); when a limit is
  added or its key changes, the waiting jobs get the key it gives them (``rekeyed``).

Owns the bits, the rows a server reads and the changes it writes; no I/O.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kiln._errors import KilnError
from kiln._model._concurrency import Concurrency, kind_group
from kiln._model._job import JSON, JobState
from kiln._model._kinds import Kind

log = logging.getLogger("kiln.adopter")

# the options a job was enqueued without (a bit each), kept until a declaration gives them
QUEUE, MAX_ATTEMPTS, PRIORITY, TIMEOUT, TAGS, RATE, CONCURRENCY = 1, 2, 4, 8, 16, 32, 64
_BY_OPTION = {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS, "priority": PRIORITY,
              "timeout": TIMEOUT, "tags": TAGS}
# the states a declaration may still change a job in: it has not started (again)
WAITING = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE)


def defaulted(options: Mapping[str, Any]) -> int:
    """The DEFAULTED bits of a job enqueued without any declaration of its kind: each
    option the enqueue (``options``) did not give. Never 0: an enqueue cannot give a
    concurrency limit, so every such job is marked."""
    bits = CONCURRENCY
    for name, bit in _BY_OPTION.items():
        if name not in options:
            bits |= bit
    if "rate_limit" not in options and "rate_key" not in options:
        bits |= RATE
    return bits


@dataclasses.dataclass(frozen=True, slots=True)
class WaitingJob:
    """A job that has not started, as a server reads it to apply a declaration."""

    id: int
    kind: str
    args: JSON
    conc_key: str | None
    defaulted: int


@dataclasses.dataclass(frozen=True, slots=True)
class Adoption:
    """What ``kind``'s declaration gives the jobs ``ids`` (enqueued without it): each
    option whose DEFAULTED bit a job has, and each job's concurrency key (``keys``;
    a job of a limited kind missing from it keeps none: its args lack the key)."""

    kind: str
    ids: tuple[int, ...]
    queue: str
    max_attempts: int
    priority: int
    timeout: float | None
    tags: tuple[str, ...]
    rate_key: str | None
    keys: Mapping[int, str]
    conc_max: int


def adoption(kind: Kind, jobs: Sequence[WaitingJob]) -> Adoption:
    """The Adoption of ``jobs`` (waiting, enqueued without a declaration) by ``kind``."""
    limit = kind.concurrency
    keys = {} if limit is None else keyed(kind.name, limit, jobs)
    return Adoption(
        kind=kind.name, ids=tuple(j.id for j in jobs), queue=kind.queue,
        max_attempts=kind.max_attempts, priority=kind.priority, timeout=kind.timeout,
        tags=kind.tags, rate_key=kind.rate_key if kind.rate_limit is not None else None,
        keys=keys, conc_max=0 if limit is None else limit.max,
    )


def keyed(kind: str, limit: Concurrency, jobs: Iterable[WaitingJob]) -> dict[int, str]:
    """Each job's key under ``limit``; a job whose args do not give one (no such
    argument, a key function that raises) is logged and keeps none."""
    group = kind_group(kind)
    keys: dict[int, str] = {}
    for job in jobs:
        try:
            keys[job.id] = limit.key_of(group, job.args)
        except (KilnError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("job %d of kind %r gets no concurrency key, so it runs without the"
                        " kind's limit: %s", job.id, kind, exc)
    return keys


def rekeyed(kind: str, limit: Concurrency, jobs: Iterable[WaitingJob]) -> dict[int, str]:
    """The jobs whose key under ``limit`` differs from the one they carry, and that key
    (a limit added, or its key changed, since they were enqueued)."""
    jobs = list(jobs)
    keys = keyed(kind, limit, jobs)
    return {j.id: keys[j.id] for j in jobs if j.id in keys and keys[j.id] != j.conc_key}
