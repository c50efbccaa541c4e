"""Building many jobs at once (``enqueue_many``): what a batch's jobs share is checked once.

A ``(kind, args)`` item without options gets its kind's options: the batch resolves and
validates them once per kind (a template, built by ``Client.build`` like any job), and
each job then only has its args checked, by encoding them once: that text is what the
store sends (``NewJob.args_json``), so no job is encoded twice. An item with options of
its own goes through ``Client.build`` as a single enqueue does. Every check of
``build_job`` applies to every job either way; the errors are the same. Owns no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kiln._concurrency import stamp
from kiln._errors import ValidationError
from kiln._job import NewJob
from kiln._json import encode as _encode
from kiln._unique import Unique

if TYPE_CHECKING:
    from kiln._client import Client


def encode_args(args: Any) -> str:
    """``args`` as stored JSON text, or the ValidationError ``build_job`` would raise."""
    try:
        return _encode(args)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"args must be JSON-serialisable: {exc}") from exc
    except RecursionError as exc:
        raise ValidationError(
            "args must be JSON-serialisable: they hold a circular reference or are nested"
            " too deeply"
        ) from exc


class _Template:
    """The options every option-less job of one kind gets in this batch."""

    __slots__ = ("job", "key", "limit", "mask", "period")

    def __init__(self, client: Client, kind: str) -> None:
        # built (and so validated) as a job with empty args and no unique or concurrency
        # key: the keys depend on each job's args, so they are computed per job below
        self.job = client.build(kind, {}, unique=None, limited=False)
        declared = client.declaration(kind)
        self.limit = declared.concurrency if declared is not None else None
        unique: Unique | None = declared.unique if declared is not None else None
        self.key: Callable[[Any], str] | None = None
        self.mask, self.period = 0, None
        if unique is not None:
            self.key = unique.keyer(self.job.kind, self.job.queue)
            self.mask, self.period = unique.mask, unique.period_seconds

    def make(self, args: Any) -> NewJob:
        t = self.job
        text = encode_args(args)
        job = NewJob(
            t.kind, args, t.queue, t.priority, None, t.delay, t.max_attempts, t.timeout,
            t.backoff, {}, t.rate_key, t.rate_limit, (), tags=t.tags,
        )
        job.args_json = text
        if self.key is not None:
            job.unique_key = self.key(args)
            job.unique_states = self.mask
            job.unique_period = self.period
        if self.limit is not None:
            stamp(job, self.limit)
        return job


def build_all(client: Client, items: Sequence[Any]) -> list[NewJob]:
    """``(kind, args)`` or ``(kind, args, options)`` items, validated into NewJobs."""
    templates: dict[str, _Template] = {}
    built: list[NewJob] = []
    append = built.append
    for item in items:
        kind = item[0]
        args = item[1]
        if len(item) > 2 and item[2]:
            append(client.build(kind, args, **dict(item[2])))
            continue
        template = templates.get(kind) if kind.__class__ is str else None
        if template is None:
            template = templates[kind] = _Template(client, kind)  # validates the kind
        append(template.make({} if args is None else args))
    return built
