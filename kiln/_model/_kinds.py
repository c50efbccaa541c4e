"""Job kinds: a handler and the options its jobs get by default, and those options as
a server publishes them (a ``Declaration``) for producers that hold no handler."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from kiln._errors import ConfigError, KilnError
from kiln._model._args import declared_args
from kiln._model._concurrency import Concurrency, Unpublished
from kiln._model._concurrency import check as check_concurrency
from kiln._model._job import DEFAULT_QUEUE, JSON, MAX_ATTEMPTS, KindDeclaration, RateLimit
from kiln._model._json import encode as dumps
from kiln._model._options import JOB_OPTIONS, JobOptions
from kiln._model._results import check_max_result_bytes
from kiln._model._retry import Backoff, as_backoff
from kiln._model._tags import check_tags
from kiln._model._unique import Unique
from kiln._model._validate import check_max_attempts, check_name, check_timeout

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
    # the args type the handler declares (``job: kiln.Job[EmailArgs]``), or None; read
    # here only (enqueue checks args against it, the worker rebuilds them): not published
    args_type: Any = None

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
            "rate_limit": None if rate is None else rate.to_json(),
            "rate_key": self.rate_key,
            "unique": None if self.unique is None else self.unique.to_json(),
        }
        if self.tags:  # only when declared, so the digests of kinds without tags stay
            options["tags"] = list(self.tags)
        if self.concurrency is not None:  # likewise
            options["concurrency"] = self.concurrency.to_json()
        for option, value in options.items():
            if not _finite(value):  # JSON has no Infinity or NaN: no store could take it
                raise ConfigError(option, value, f"kind {self.name!r}: its {option} holds a"
                                  " number that is not finite, which cannot be published")
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
        field it lacks (published by an older kiln) keeps its default. A value it cannot
        read (a newer kiln's form of an option) raises ConfigError naming the kind and
        the option: the caller refuses that kind only (kiln._client._catalog)."""
        o: Mapping[str, Any] = published.options
        kind = published.kind

        def read(name: str, parse: Callable[[Any], Any], default: Any = None) -> Any:
            value = o.get(name)
            if value is None:
                return default
            try:
                return parse(value)
            except (KilnError, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise unreadable(kind, name, value, exc) from exc

        return cls(
            name=kind, queue=read("queue", _text) or DEFAULT_QUEUE,
            max_attempts=read("max_attempts", int) or MAX_ATTEMPTS,
            timeout=read("timeout", float), priority=read("priority", int, 0),
            rate_limit=read("rate_limit", _rate_limit), rate_key=read("rate_key", _text),
            digest=published.digest, unique=read("unique", _unique),
            tags=read("tags", _tags, ()), concurrency=read("concurrency", _concurrency),
        )


def unreadable(kind: str, option: str, value: Any, exc: BaseException) -> ConfigError:
    """The error of a kind whose published ``option`` this kiln cannot read."""
    field = exc.field if isinstance(exc, ConfigError) and exc.field.startswith(option) \
        else option
    shown = exc.value if isinstance(exc, ConfigError) and field != option else value
    why = exc.rule if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return ConfigError(
        field, shown,
        f"kind {kind!r} was published with a {option} this kiln cannot read ({why});"
        " a newer kiln's declaration? Enqueue it from a process that registers the kind"
        " or runs that kiln, or upgrade this one (other kinds are not affected)",
    )


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _rate_limit(value: Any) -> RateLimit:
    key = value.get("key")
    return RateLimit(int(value["rate"]), float(value["per"]), int(value["burst"]),
                     None if key is None else str(key))


def _unique(value: Any) -> Unique:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return Unique.from_json(value)


def _tags(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return tuple(str(t) for t in value)


def _concurrency(value: Any) -> Concurrency | Unpublished:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return Concurrency.from_json(value)


def _backoff_json(policy: Backoff | None) -> JSON:
    """Exponential and Constant as stored with a job; any other policy by its name only
    (the worker that runs the kind applies its own policy, whatever is published)."""
    if policy is None:
        return None
    to_json = getattr(policy, "to_json", None)
    return to_json() if to_json is not None else {"type": type(policy).__name__.lower()}


def make_kind(name: str, handler: Handler, **options: Unpack[JobOptions]) -> Kind:
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
        check_max_result_bytes(max_result_bytes)
    tags: tuple[str, ...] = ()
    if "tags" in options:
        tags = check_tags(options["tags"])
    concurrency = check_concurrency(options.get("concurrency"))
    if not callable(handler):
        raise ConfigError("handler", handler, "must be callable")
    return Kind(
        name=name, handler=handler, queue=queue, max_attempts=max_attempts,
        backoff=as_backoff(options["backoff"]) if "backoff" in options else None,
        timeout=timeout, priority=options.get("priority", 0), rate_limit=rate_limit,
        rate_key=rate_key, unique=unique, max_result_bytes=max_result_bytes, tags=tags,
        concurrency=concurrency, args_type=declared_args(handler),
    )
