"""Building a job from enqueue arguments: every check, and the options' precedence.

An option given at enqueue wins over the kind's declaration (a handler's ``Kind``, or a
``Declaration`` a server published), which wins over the defaults. A job built without
any declaration records the options it took from the defaults (``NewJob.defaulted``):
they follow the kind's declaration once a server publishes it (kiln._model._adoption).
Everything is checked before anything is written: a bad input raises ValidationError
naming the problem. Pure: no I/O, so every producer (the client, the CLI, kiln.testing,
recurring jobs) builds the same jobs from the same arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Unpack

from kiln._errors import UnknownKindError, ValidationError
from kiln._model import _args
from kiln._model import _validate as v
from kiln._model._adoption import defaulted
from kiln._model._concurrency import stamp
from kiln._model._job import DEFAULT_QUEUE, MAX_ATTEMPTS, NewJob, RateLimit
from kiln._model._kinds import Declaration, Kind
from kiln._model._options import ENQUEUE_OPTIONS, EnqueueOptions
from kiln._model._retry import as_backoff, backoff_to_json
from kiln._model._tags import check_tags
from kiln._model._unique import Unique


def encode_args(args: Any) -> str:
    """``args`` as stored JSON text, or the ValidationError ``build_job`` would raise
    (not JSON, or JSON some store cannot write: every producer gets the same answer)."""
    return v.check_json("args", args)


def build_job(
    kind: str, args: Any, known: Mapping[str, Kind] | None,
    declared: Kind | Declaration | None = None, *, limited: bool = True,
    **options: Unpack[EnqueueOptions],
) -> NewJob:
    """Validate and turn enqueue arguments into a NewJob; raise before anything is written.

    An option given here wins over the kind's declaration: the one in ``known``, else
    ``declared`` (published by a server), else the defaults."""
    v.check_name("kind", kind)
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:  # only from untyped callers (a dict of a form's fields, say)
        raise ValidationError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
    spec = known.get(kind) if known else declared
    if known and spec is None:
        raise UnknownKindError(kind)
    # a dataclass or Pydantic model as JSON; a mapping checked against the handler's
    # declared args type (a Kind here: a published Declaration carries none)
    args = _args.encode(getattr(spec, "args_type", None), kind, args)
    args_json = encode_args(args)  # the check, and the text the store sends
    queue = options.get("queue", spec.queue if spec else DEFAULT_QUEUE)
    v.check_name("queue", queue)
    metadata = dict(options.get("metadata") or {})
    v.check_json("metadata", metadata)
    run_at = options.get("run_at")
    if run_at is not None and not isinstance(run_at, datetime):
        raise ValidationError(f"run_at must be a datetime, got {run_at!r}")
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.replace(tzinfo=UTC)
    backoff = as_backoff(options.get("backoff"))
    timeout = options.get("timeout", spec.timeout if spec else None)
    rate_limit: RateLimit | None = options.get("rate_limit", spec.rate_limit if spec else None)
    rate_key = options.get("rate_key", spec.rate_key if spec else None)
    if rate_limit is not None and rate_key is None:
        rate_key = kind
    if rate_limit is not None and rate_limit.key is not None and "rate_key" not in options:
        assert rate_key is not None
        rate_key = rate_limit.key_of(rate_key, args, options.get("metadata") or {})
    if rate_key is not None:
        v.check_name("rate_key", rate_key)
    depends_on = tuple(options.get("depends_on") or ())
    if any(isinstance(d, bool) or not isinstance(d, int) for d in depends_on):
        raise ValidationError(f"depends_on must hold job ids, got {list(depends_on)!r}")
    unique = options.get("unique", spec.unique if spec else None)
    # tags given here replace the kind's, as every other option does
    tags = check_tags(options["tags"]) if "tags" in options else spec.tags if spec else ()
    job = _with_unique(unique, NewJob(
        kind=kind,
        args=args,
        queue=queue,
        priority=v.check_priority(options.get("priority", spec.priority if spec else 0)),
        run_at=run_at,
        delay=v.check_delay(options.get("delay", 0.0)),
        max_attempts=v.check_max_attempts(
            options.get("max_attempts", spec.max_attempts if spec else MAX_ATTEMPTS)
        ),
        timeout=None if timeout is None else v.check_timeout(timeout),
        backoff=backoff_to_json(backoff) if backoff is not None else None,
        metadata=metadata,
        rate_key=rate_key,
        rate_limit=rate_limit,
        depends_on=depends_on,
        tags=tags,
    ))
    job.args_json = args_json
    if spec is None and unique is None:  # a unique job's key may hold its queue: it stays
        job.defaulted = defaulted(options)  # until a declaration is published
    if limited and spec is not None and spec.concurrency is not None:
        stamp(job, spec.concurrency)
    return job


def after(job: NewJob, positions: Iterable[int]) -> NewJob:
    """``job``, to run after the jobs at ``positions`` of its own insert (the later
    steps of enqueue_chain, the final job of enqueue_fan_in): a dependency like
    ``depends_on``, so a unique job is refused the same way."""
    if job.unique_key is not None:
        raise ValidationError(
            f"a unique job cannot have depends_on: {job.kind!r} is unique, so it cannot"
            " run after the jobs before it; enqueue it on its own"
        )
    job.after = tuple(positions)
    return job


def _with_unique(unique: Any, job: NewJob) -> NewJob:
    if unique is None:
        return job
    if not isinstance(unique, Unique):
        raise ValidationError(f"unique must be a kiln.Unique or None, got {unique!r}")
    if job.depends_on:
        raise ValidationError("a unique job cannot have depends_on: enqueue it without")
    job.unique_key = unique.key_of(job.kind, job.queue, job.args)
    job.unique_states = unique.mask
    job.unique_period = unique.period_seconds
    return job


def check_names(jobs: Sequence[NewJob]) -> None:
    """The names of jobs built without ``build_job`` (a NewJob made by hand) follow the
    same rule, so no producer can store a name the others would refuse; so do their
    args and metadata (a job ``build_job`` made has its args' text already: checked)."""
    for kind, queue, rate_key in {(job.kind, job.queue, job.rate_key) for job in jobs}:
        v.check_name("kind", kind)
        v.check_name("queue", queue)
        if rate_key is not None:
            v.check_name("rate_key", rate_key)
    for index, job in enumerate(jobs):
        if job.tags:
            job.tags = check_tags(job.tags)
        if job.args_json is None:
            job.args_json = encode_args(job.args)
            v.check_json("metadata", job.metadata)
        if job.after or job.depends_on:
            _check_after(index, job)


def _check_after(index: int, job: NewJob) -> None:
    """A job after others of its insert: positions of earlier jobs, and not unique."""
    if any(isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < index
           for a in job.after):
        raise ValidationError(
            f"job {index} of the batch may only come after earlier jobs of it"
            f" (positions 0 to {index - 1}), got after={list(job.after)!r}"
        )
    if job.unique_key is not None:
        raise ValidationError("a unique job cannot have depends_on: enqueue it without")
