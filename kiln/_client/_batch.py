"""Building many jobs at once (``enqueue_many``): what a batch's jobs share is checked once.
Also the batches of ``enqueue_chain`` and ``enqueue_fan_in``: every step built (and so
checked) before anything is written, the later steps after earlier ones of the same
insert (``NewJob.after``), so the store writes the whole graph in one transaction.

A ``(kind, args)`` item without options gets its kind's options: the batch resolves and
validates them once per kind (a template, built by ``Client.build`` like any job), and
each job then only has its args checked, by encoding them once: that text is what the
store sends (``NewJob.args_json``), so no job is encoded twice. An item with options of
its own goes through ``Client.build`` as a single enqueue does. Every check of
``build_job`` applies to every job either way; the errors are the same. Owns no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, Unpack

from kiln._errors import ValidationError
from kiln._model import _args
from kiln._model._build import after, encode_args
from kiln._model._concurrency import stamp
from kiln._model._job import NewJob
from kiln._model._kindref import resolve
from kiln._model._kinds import Declaration, Kind
from kiln._model._options import EnqueueOptions
from kiln._model._unique import Unique


class Builder(Protocol):
    """What a batch needs of the client that builds it."""

    def build(self, kind: str, args: Any = None, *, limited: bool = True,
              **options: Unpack[EnqueueOptions]) -> NewJob: ...

    def declaration(self, kind: str) -> Kind | Declaration | None: ...


class _Template:
    """The options every option-less job of one kind gets in this batch."""

    __slots__ = ("args_type", "job", "key", "limit", "mask", "period")

    def __init__(self, client: Builder, kind: str) -> None:
        # built (and so validated) as a job with empty args and no unique or concurrency
        # key: the keys depend on each job's args, so they are computed per job below
        # (args [], not {}: a handler's declared dataclass or model would refuse {})
        self.job = client.build(kind, [], unique=None, limited=False)
        declared = client.declaration(kind)
        self.args_type = getattr(declared, "args_type", None)  # a Kind's: see _model._args
        self.limit = declared.concurrency if declared is not None else None
        unique: Unique | None = declared.unique if declared is not None else None
        self.key: Callable[[Any], str] | None = None
        self.mask, self.period = 0, None
        if unique is not None:
            self.key = unique.keyer(self.job.kind, self.job.queue)
            self.mask, self.period = unique.mask, unique.period_seconds

    def make(self, args: Any) -> NewJob:
        t = self.job
        args = _args.encode(self.args_type, t.kind, args)
        text = encode_args(args)
        job = NewJob(
            t.kind, args, t.queue, t.priority, None, t.delay, t.max_attempts, t.timeout,
            t.backoff, {}, t.rate_key, t.rate_limit, (), tags=t.tags,
        )
        job.args_json = text
        job.defaulted = t.defaulted
        if self.key is not None:
            job.unique_key = self.key(args)
            job.unique_states = self.mask
            job.unique_period = self.period
        if self.limit is not None:
            stamp(job, self.limit)
        return job


def build_all(client: Builder, items: Sequence[Any]) -> list[NewJob]:
    """``(kind, args)`` or ``(kind, args, options)`` items, validated into NewJobs; a
    ready-made ``NewJob`` item is taken as it is (the store's checks still apply)."""
    templates: dict[str, _Template] = {}
    built: list[NewJob] = []
    append = built.append
    for item in items:
        if isinstance(item, NewJob):
            append(item)
            continue
        kind = item[0]
        args = item[1]
        if kind.__class__ is not str:  # a KindRef: a JobKind, a JobHandle
            kind, args = resolve(kind, args)
        if len(item) > 2 and item[2]:
            append(client.build(kind, args, **dict(item[2])))
            continue
        template = templates.get(kind) if kind.__class__ is str else None
        if template is None:
            if _keyed_rate(client, kind):  # its rate key depends on each job's args
                append(client.build(kind, args))
                continue
            template = templates[kind] = _Template(client, kind)  # validates the kind
        append(template.make({} if args is None else args))
    return built


def _keyed_rate(client: Builder, kind: Any) -> bool:
    """A kind whose RateLimit takes its key from args or metadata: a template built
    with empty args would be refused, and each job has a key of its own."""
    declared = client.declaration(kind) if isinstance(kind, str) else None
    limit = getattr(declared, "rate_limit", None)
    return limit is not None and limit.key is not None


def chain(
    client: Builder, steps: Sequence[tuple[str, Any]], options: EnqueueOptions
) -> list[NewJob]:
    """Jobs that run one after another: each after the one before it in the batch.
    ``options`` apply to every step; a ``depends_on`` among them to the first only."""
    jobs: list[NewJob] = []
    for kind, args in steps:
        extra = options.copy()
        if jobs:
            extra.pop("depends_on", None)
        job = client.build(kind, args, **extra)
        jobs.append(after(job, (len(jobs) - 1,)) if jobs else job)
    return jobs


def fan_in(
    client: Builder, parts: Sequence[tuple[str, Any]], then: tuple[str, Any],
    options: EnqueueOptions,
) -> list[NewJob]:
    """``parts``, then one job after all of them (last in the batch)."""
    if "depends_on" in options:
        raise ValidationError("enqueue_fan_in sets depends_on itself: the final job"
                              " depends on the parts")
    jobs = [client.build(kind, args, **options) for kind, args in parts]
    final = client.build(then[0], then[1], **options)
    return [*jobs, after(final, range(len(jobs)))]
