"""What a deploy-sequence case says: two versions of one app, the jobs their producers
enqueue in each phase, and what must have become of them.

A sequence has three phases: ``a`` (only version A's servers run), ``ab`` (B's first
server beside A's: a rolling deploy) and ``b`` (A's servers stopped, their jobs in
flight handed back; B's alone). A new declaration change is one more ``Case`` in
tests/deploys/cases.py: A's declarations, B's, the jobs, the expected end. Owns these
shapes only; tests/deploys/sequence.py runs them, tests/deploys/checks.py judges them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kiln

PHASES = ("a", "ab", "b")
COMPLETED = "completed"  # the job must end completed
FAILED = "failed"  # it must end failed, having used every attempt its row allows
# it ends completed, or waits where no live server of B can claim it (the user's doing:
# a kind removed, moved to a queue nobody serves) and kiln says so
COMPLETED_OR_REPORTED = "completed or reported"
# it must end failed at once, by kiln.Fail, on a server of a version that knows it:
# below the attempts its row allows, its last error the Fail's
FAILED_FOR_GOOD = "failed for good"

Args = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Version:
    """One release of the app: its kinds with their ``@app.job`` options, the queues
    its servers serve, its queue limits, and options its servers publish beyond what
    this kiln would (what a newer kiln's server publishes during a rolling upgrade).
    ``knows_fail``: False for a kiln older than ``kiln.Fail``, whose handlers cannot
    raise it (tests/deploys/versions.py)."""

    name: str
    kinds: Mapping[str, Mapping[str, Any]]
    queues: Mapping[str, int]
    queue_limits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    publishes: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    knows_fail: bool = True


@dataclasses.dataclass(frozen=True)
class Enqueue:
    """Jobs one producer enqueues, one call each, in one phase, and their expected end.

    ``by``: the version of the producer; ``bare``: a producer without handlers (a web
    app, the CLI) that resolves kinds from the published declarations. Handler args:
    ``seconds`` (how long it works), ``fail_below`` (it raises while the attempt is
    lower), ``fail_for_good`` (it raises kiln.Fail; on a kiln older than Fail, a plain
    error). ``queue``/``max_attempts``: what every job's row must say at the end;
    ``distinct``: how many different ids the calls returned (unique jobs);
    ``inserted``: how many of the calls inserted a job.
    """

    by: str
    phase: str
    kind: str
    args: tuple[Args, ...]
    bare: bool = False
    expect: str = COMPLETED
    queue: str | None = None
    max_attempts: int | None = None
    distinct: int | None = None
    inserted: int | None = None


@dataclasses.dataclass(frozen=True)
class Cap:
    """At most ``max`` handlers at once of the jobs of ``kind`` (or of ``queue``), per
    value of ``args[by]`` when ``by`` is given, among the executions started in
    ``phases`` of jobs enqueued by the versions ``enqueued_by``."""

    max: int
    kind: str | None = None
    queue: str | None = None
    by: str | None = None
    phases: tuple[str, ...] = PHASES
    enqueued_by: tuple[str, ...] = ("a", "b")


@dataclasses.dataclass(frozen=True)
class AtOnce:
    """At least ``least`` handlers at once of ``kind`` (or ``queue``) among the
    executions started in ``phases``: a limit that B lifted is lifted."""

    least: int
    kind: str | None = None
    queue: str | None = None
    phases: tuple[str, ...] = ("b",)


@dataclasses.dataclass(frozen=True)
class Rate:
    """No window of ``limit.per`` admits more than ``limit.rate + limit.burst`` jobs of
    ``kind`` (of each of ``keys``) among those admitted from the start of ``since`` on."""

    kind: str
    limit: kiln.RateLimit
    since: str = "a"
    # only the jobs of these rate keys, each key a bucket of its own (a keyed limit,
    # RateLimit(key=...)); None: every job of ``kind`` together
    keys: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    a: Version
    b: Version
    jobs: tuple[Enqueue, ...]
    caps: tuple[Cap, ...] = ()
    at_once: tuple[AtOnce, ...] = ()
    rates: tuple[Rate, ...] = ()
    # why the case fails on today's main: "issue 39 item N: ..." (strict xfail), by
    # backend ("sqlite", "postgresql", "mysql") or "*" for all
    xfail: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def xfail_reason(self, backend: str) -> str | None:
        return self.xfail.get(backend, self.xfail.get("*"))
