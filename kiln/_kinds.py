"""Job kinds: a handler and the options its jobs get by default, and those options as
a server publishes them (a ``Declaration``) for producers that hold no handler."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from kiln._concurrency import Concurrency, Unpublished
from kiln._concurrency import check as check_concurrency
from kiln._errors import ConfigError
from kiln._job import DEFAULT_QUEUE, JSON, MAX_ATTEMPTS, KindDeclaration, RateLimit
from kiln._options import JOB_OPTIONS, JobOptions
from kiln._retry import Backoff, as_backoff
from kiln._unique import Unique
from kiln.stores._rows import dumps

Handler = Callable[..., Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    name: str
    handler: Handler
    queue: str = DEFAULT_QUEUE
    max_attempts: int = MAX_ATTEMPTS
    backoff: Backoff | None = None
    timeout: float | None = None
    priority: int = 0
    rate_limit: RateLimit | None = None
    rate_key: str | None = None
    unique: Unique | None = None
    # largest stored result in bytes of JSON; None: the server's max_result_bytes. Read
    # on the worker only, so it is not part of the published declaration
    max_result_bytes: int | None = None
    tags: tuple[str, ...] = ()
    concurrency: Concurrency | None = None

    @property
    def is_async(self) -> bool:
        """``async def`` functions, and objects whose ``__call__`` is ``async def``."""
        handler = self.handler
        return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - an instance's own __call__
        )

    def declaration(self) -> KindDeclaration:
        """The options this kind's jobs get by default, as a server publishes them."""
        rate = self.rate_limit
        options: dict[str, JSON] = {
            "queue": self.queue, "priority": self.priority, "max_attempts": self.max_attempts,
            "timeout": self.timeout, "backoff": _backoff_json(self.backoff),
            "rate_limit": None if rate is None else
            {"rate": rate.rate, "per": rate.per, "burst": rate.burst},
            "rate_key": self.rate_key,
            "unique": None if self.unique is None else self.unique.to_json(),
        }
        if self.tags:  # only when declared, so the digests of kinds without tags stay
            options["tags"] = list(self.tags)
        if self.concurrency is not None:  # likewise
            options["concurrency"] = self.concurrency.to_json()
        digest = hashlib.sha256(dumps(options).encode()).hexdigest()[:16]
        return KindDeclaration(kind=self.name, options=options, digest=digest)


@dataclasses.dataclass(frozen=True, slots=True)
class Declaration:
    """A kind's defaults as another server published them (no handler here)."""

    name: str
    queue: str = DEFAULT_QUEUE
    max_attempts: int = MAX_ATTEMPTS
    timeout: float | None = None
    priority: int = 0
    rate_limit: RateLimit | None = None
    rate_key: str | None = None
    unique: Unique | None = None
    digest: str = ""
    tags: tuple[str, ...] = ()
    concurrency: Concurrency | Unpublished | None = None

    @classmethod
    def of(cls, published: KindDeclaration) -> Declaration:
        """Read what a server published; a field this kiln does not know is ignored and a
        field it lacks (published by an older kiln) keeps its default."""
        o: Mapping[str, Any] = published.options
        rate = o.get("rate_limit")
        unique = o.get("unique")
        tags = o.get("tags")
        limit = o.get("concurrency")
        return cls(
            name=published.kind, queue=o.get("queue") or DEFAULT_QUEUE,
            max_attempts=int(o.get("max_attempts") or MAX_ATTEMPTS), timeout=o.get("timeout"),
            priority=int(o.get("priority") or 0),
            rate_limit=RateLimit(int(rate["rate"]), float(rate["per"]), int(rate["burst"]))
            if isinstance(rate, dict) else None,
            rate_key=o.get("rate_key"), digest=published.digest,
            unique=Unique.from_json(unique) if isinstance(unique, dict) else None,
            tags=tuple(str(t) for t in tags) if isinstance(tags, list) else (),
            concurrency=Concurrency.from_json(limit) if isinstance(limit, dict) else None,
        )


def _backoff_json(policy: Backoff | None) -> JSON:
    """Exponential and Constant as stored with a job; any other policy by its name only
    (the worker that runs the kind applies its own policy, whatever is published)."""
    if policy is None:
        return None
    to_json = getattr(policy, "to_json", None)
    return to_json() if to_json is not None else {"type": type(policy).__name__.lower()}


def make_kind(name: str, handler: Handler, **options: Unpack[JobOptions]) -> Kind:
    from kiln._validate import check_max_attempts, check_name, check_timeout

    check_name("kind", name)
    unknown = sorted(set(options) - JOB_OPTIONS)
    if unknown:
        raise ConfigError("option", unknown[0], f"kind {name!r}: not an option of a kind"
                          f" (the options: {', '.join(sorted(JOB_OPTIONS))})")
    queue = options.get("queue", DEFAULT_QUEUE)
    check_name("queue", queue)
    max_attempts = options.get("max_attempts", MAX_ATTEMPTS)
    check_max_attempts(max_attempts)
    timeout = options.get("timeout")
    if timeout is not None:
        check_timeout(timeout)
    rate_limit = options.get("rate_limit")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise ConfigError("rate_limit", rate_limit, "must be a kiln.RateLimit")
    rate_key = options.get("rate_key")
    if rate_limit is not None and rate_key is None:
        rate_key = name
    unique = options.get("unique")
    if unique is not None and not isinstance(unique, Unique):
        raise ConfigError("unique", unique, "must be a kiln.Unique")
    max_result_bytes = options.get("max_result_bytes")
    if max_result_bytes is not None:
        from kiln._results import check_max_result_bytes

        check_max_result_bytes(max_result_bytes)
    tags: tuple[str, ...] = ()
    if "tags" in options:
        from kiln._tags import check_tags

        tags = check_tags(options["tags"])
    concurrency = check_concurrency(options.get("concurrency"))
    if concurrency is not None and unique:
        raise ConfigError("concurrency", options.get("concurrency"),
                          "a unique kind cannot have a concurrency limit (not supported yet)")
    if not callable(handler):
        raise ConfigError("handler", handler, "must be callable")
    return Kind(
        name=name, handler=handler, queue=queue, max_attempts=max_attempts,
        backoff=as_backoff(options["backoff"]) if "backoff" in options else None,
        timeout=timeout, priority=options.get("priority", 0), rate_limit=rate_limit,
        rate_key=rate_key, unique=unique, max_result_bytes=max_result_bytes, tags=tags,
        concurrency=concurrency,
    )
