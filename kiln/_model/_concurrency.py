"""Global concurrency limits: ``kiln.Concurrency`` and the key it gives a job.

At most ``max`` jobs of one key run at once across the whole fleet. The key is
computed here, at enqueue, from the kind and what ``key`` names, and stored with the
job (``conc_key``); the stores enforce the limit in the claim itself, under a lock on
the key's row in kiln_concurrency_keys, counting the key's running jobs after the
lock was taken (docs/adr/0006-global-concurrency.md). A queue's limit has no key on
its jobs: the claim counts the queue's running jobs under the lock of the row
``queue:NAME``. Owns validation and the key; no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kiln._errors import ConfigError, ValidationError
from kiln._model._json import encode
from kiln._model._json import encode as dumps
from kiln._model._validate import check_name

MAX = 10_000  # jobs of one key at once; beyond it a typo, not a plan
KEY_BYTES = 255  # a stored key longer than this is hashed (its group stays readable)
SEPARATOR = "|"  # between a key's group and its value: the gauge's label is the group
CALLABLE = "callable"  # what a declaration publishes for a key computed by a function

KeyFunction = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``max`` jobs of a key running at once, on every server together.

    ``key``: None (one limit for the whole kind, or the whole queue), ``"args.NAME"``
    (one limit per value of that top-level argument: per tenant, say; a job without
    it is refused), or a function of the job's args returning the value (it cannot be
    published: a producer without the handler cannot enqueue the kind).
    """

    max: int
    key: str | KeyFunction | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) \
                or not 1 <= self.max <= MAX:
            raise ConfigError("concurrency.max", self.max, f"must be a whole number in 1..{MAX}")
        key = self.key
        if key is None or callable(key):
            return
        if not isinstance(key, str) or not key.startswith("args.") or not key[5:]:
            raise ConfigError("concurrency.key", key, 'use None, "args.NAME" or a function')

    @property
    def published(self) -> bool:
        """False for a key function: only the process holding it computes the key."""
        return not callable(self.key)

    def key_of(self, group: str, args: Any) -> str:
        """The job's stored key: ``group`` ("kind:NAME"), and the key's value. A
        ValidationError when ``key`` names an argument the job does not have."""
        key = self.key
        if key is None:
            return group
        if callable(key):
            value = key(args)
        else:
            name = key[5:]
            if not isinstance(args, dict) or name not in args:
                raise ValidationError(
                    f"concurrency key {key}: the job's args have no top-level key {name!r}"
                    " (nothing was written)"
                )
            value = args[name]
        try:
            text = encode(value)
        except (TypeError, ValueError, RecursionError):
            text = dumps(value)
        stored = f"{group}{SEPARATOR}{text}"
        if len(stored.encode()) <= KEY_BYTES:
            return stored
        digest = hashlib.sha256(text.encode()).hexdigest()[:40]
        return f"{group[:KEY_BYTES - 42]}{SEPARATOR}#{digest}"

    def to_json(self) -> dict[str, Any]:
        return {"max": self.max, "key": CALLABLE if callable(self.key) else self.key}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Concurrency | Unpublished:
        if data.get("key") == CALLABLE:
            return Unpublished(int(data["max"]))
        return cls(max=int(data["max"]), key=data.get("key"))


@dataclasses.dataclass(frozen=True, slots=True)
class Unpublished:
    """A published limit whose key is a function only the handler's process holds."""

    max: int


def kind_group(kind: str) -> str:
    return f"kind:{kind}"


def queue_group(queue: str) -> str:
    return f"queue:{queue}"


def key_prefix(kind: str) -> str:
    """What every stored key of ``kind`` but its group ("kind:NAME") starts with:
    "kind:NAME|", or for a name too long to keep whole in a hashed key, the part kept
    (``key_of``). The stores find a kind's key rows by the group and this prefix."""
    group = kind_group(kind)
    head = group[:KEY_BYTES - 42]
    return group + SEPARATOR if head == group else head


def group_of(conc_key: str) -> str:
    """The bounded label of a stored key: "kind:NAME" or "queue:NAME"."""
    return conc_key.split(SEPARATOR, 1)[0]


def check(value: Any, field: str = "concurrency") -> Concurrency | None:
    if value is not None and not isinstance(value, Concurrency):
        raise ConfigError(field, value, "must be a kiln.Concurrency or None")
    return value


def stamp(job: Any, limit: Concurrency | Unpublished | None) -> None:
    """Set the key and max of a NewJob from its kind's limit (or refuse it)."""
    if limit is None:
        return
    if isinstance(limit, Unpublished):
        raise ValidationError(
            f"kind {job.kind!r} has a concurrency limit keyed by a function, which only"
            " the processes holding its handler can compute: enqueue it from such a"
            " process (an App that registers the kind), or key it by \"args.NAME\""
        )
    job.conc_key = limit.key_of(kind_group(job.kind), job.args)
    job.conc_max = limit.max


def check_queue_limit(queue: str, limit: Any) -> Concurrency:
    """A queue's limit: a Concurrency without a key (its jobs carry none)."""
    check_name("queue", queue)
    checked = check(limit, "queue concurrency")
    if checked is None or checked.key is not None:
        raise ConfigError("queue concurrency", limit,
                          "a queue's limit is kiln.Concurrency(max=N), without a key")
    return checked


def limited_queues(
    queues: Iterable[str], limits_on_kinds: bool, declared: Iterable[str]
) -> set[str]:
    """The queues a server claims through the limited claim: all of them when one of
    its kinds has a limit (its jobs may go to any queue), else those with a queue limit
    (``declared``: "queue:NAME" groups, this server's and the ones found in the store)."""
    names = set(queues)
    if limits_on_kinds:
        return names
    return {q for q in names if queue_group(q) in set(declared)}
