"""The options of a kind (``@app.job``) and of an enqueue, typed once, with their
defaults named once.

Both are ``TypedDict``s for ``**options: Unpack[...]``: a type checker sees every
option and its type; at run time an unknown option is still refused with an error
that names it (``ENQUEUE_OPTIONS`` and ``JOB_OPTIONS`` are the known ones)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict

from kiln._model._concurrency import Concurrency
from kiln._model._job import RateLimit
from kiln._model._retry import Backoff
from kiln._model._unique import Unique

__all__ = ["ENQUEUE_OPTIONS", "JOB_OPTIONS", "EnqueueOptions", "JobOptions"]

BackoffOption = Backoff | Callable[[int], float] | None  # a policy, or attempt -> seconds


class JobOptions(TypedDict, total=False):
    """What ``@app.job(kind, ...)`` declares: the defaults every job of the kind gets,
    whoever enqueues it (servers publish them)."""

    queue: str  # kiln._model._job.DEFAULT_QUEUE, "default"
    priority: int  # 0; lower runs first
    max_attempts: int  # kiln._model._job.MAX_ATTEMPTS, 25
    timeout: float | None  # seconds per attempt; None: the server's (30 minutes)
    backoff: BackoffOption  # None: Exponential(1, 3600)
    rate_limit: RateLimit | None
    rate_key: str | None  # the kind's name when it has a rate limit
    unique: Unique | None
    tags: Sequence[str]
    concurrency: Concurrency | None  # a fleet-wide cap on running jobs
    max_result_bytes: int | None  # None: the server's max_result_bytes


class EnqueueOptions(TypedDict, total=False):
    """What one enqueue may set; each wins over the kind's declaration."""

    queue: str
    priority: int
    delay: float  # seconds from now
    run_at: datetime | None  # instead of delay; naive means UTC
    max_attempts: int
    timeout: float | None  # None: the kind's, else the server's
    backoff: BackoffOption
    metadata: Mapping[str, Any] | None
    rate_limit: RateLimit | None
    rate_key: str | None
    depends_on: Sequence[int] | None  # job ids that must complete first
    unique: Unique | None
    tags: Sequence[str]


class NoMoreKeys(TypedDict):
    """No keyword beyond the named ones, to a type checker; a function that takes
    ``**unknown: Unpack[NoMoreKeys]`` still receives what an untyped caller passes, and
    refuses it with an error that names the keys."""


ENQUEUE_OPTIONS = frozenset(EnqueueOptions.__annotations__)
JOB_OPTIONS = frozenset(JobOptions.__annotations__)
