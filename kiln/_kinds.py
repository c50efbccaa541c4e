"""Job kinds: a handler and the options its jobs get by default."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from kiln._errors import ConfigError
from kiln._job import RateLimit
from kiln._retry import Backoff, as_backoff

Handler = Callable[..., Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    name: str
    handler: Handler
    queue: str = "default"
    max_attempts: int = 25
    backoff: Backoff | None = None
    timeout: float | None = None
    priority: int = 0
    rate_limit: RateLimit | None = None
    rate_key: str | None = None

    @property
    def is_async(self) -> bool:
        """``async def`` functions, and objects whose ``__call__`` is ``async def``."""
        handler = self.handler
        return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - an instance's own __call__
        )


def make_kind(name: str, handler: Handler, **options: Any) -> Kind:
    from kiln._validate import check_max_attempts, check_name, check_timeout

    check_name("kind", name)
    queue = options.get("queue", "default")
    check_name("queue", queue)
    check_max_attempts(options.get("max_attempts", 25))
    if options.get("timeout") is not None:
        check_timeout(options["timeout"])
    if "backoff" in options:
        options["backoff"] = as_backoff(options["backoff"])
    rate_limit = options.get("rate_limit")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise ConfigError("rate_limit", rate_limit, "must be a kiln.RateLimit")
    if rate_limit is not None and options.get("rate_key") is None:
        options["rate_key"] = name
    if not callable(handler):
        raise ConfigError("handler", handler, "must be callable")
    return Kind(name=name, handler=handler, **options)
