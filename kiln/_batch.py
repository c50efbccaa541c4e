"""Building many jobs at once (``enqueue_many``): what a batch's jobs share is checked once.

A ``(kind, args)`` item without options gets its kind's options: the batch resolves and
validates them once per kind (a template, built by ``Client.build`` like any job), and
each job then only has its args checked, by encoding them once: that text is what the
store sends (``NewJob.args_json``), so no job is encoded twice. An item with options of
its own goes through ``Client.build`` as a single enqueue does. Every check of
``build_job`` applies to every job either way; the errors are the same. Owns no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kiln._errors import ValidationError
from kiln._job import NewJob
from kiln._unique import Unique

if TYPE_CHECKING:
    from kiln._client import Client



def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


# compact, NaN refused (as check_json refuses it): the text the stores would have made.
# The C encoder made once: JSONEncoder.encode makes one per call, which costs more than
# encoding a small job's args. Without circular-reference markers (a cycle ends in a
# RecursionError, refused below like any other value that is not JSON).
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
if _C_ENCODER is not None:
    _chunks = _C_ENCODER(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def _encode(value: Any) -> str:
        return "".join(_chunks(value, 0))
else:  # pragma: no cover - Python without the C accelerator
    _slow = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def _encode(value: Any) -> str:
        return _slow.encode(value)


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

    __slots__ = ("job", "unique")

    def __init__(self, client: Client, kind: str) -> None:
        # built (and so validated) as a job with empty args and no unique key: the key
        # depends on each job's args, so it is computed per job below
        self.job = client.build(kind, {}, unique=None)
        declared = client.declaration(kind)
        self.unique: Unique | None = declared.unique if declared is not None else None

    def make(self, args: Any) -> NewJob:
        t = self.job
        text = encode_args(args)
        job = NewJob(
            t.kind, args, t.queue, t.priority, None, t.delay, t.max_attempts, t.timeout,
            t.backoff, {}, t.rate_key, t.rate_limit, (),
        )
        job.args_json = text
        unique = self.unique
        if unique is not None:
            job.unique_key = unique.key_of(job.kind, job.queue, args)
            job.unique_states = unique.mask
            job.unique_period = unique.period
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
