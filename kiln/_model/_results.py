"""Stored results: a handler's return value as the JSON text a store writes.

Owns the rules a result must meet before it leaves the worker (JSON, writable by every
store as kiln._model._json.unstorable says, at most ``max_result_bytes`` of UTF-8); it
does no I/O. The executor calls ``encoded`` once per attempt that returned something
other than None: None stores nothing and never gets here, so the common path pays
nothing. A value that breaks a rule raises ResultError, which fails that attempt
(retried per the kind's policy) with a message that says what to change; nothing is
written for it.
"""

from __future__ import annotations

import json
from typing import Any

from kiln._errors import ConfigError, ResultError
from kiln._model._json import unstorable

DEFAULT_MAX_RESULT_BYTES = 64 * 1024
# the largest max_result_bytes accepted: a result travels in the batched write of many
# (the completer bounds a batch's bytes too), and MariaDB refuses a statement larger
# than its max_allowed_packet (16 MiB by default)
MAX_RESULT_BYTES_LIMIT = 4 * 1024 * 1024

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_TYPES = "dict, list, str, int, float, bool or None"


def check_max_result_bytes(value: Any, field: str = "max_result_bytes") -> int:
    """``value`` as a limit in bytes, or a ConfigError naming the rule."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= MAX_RESULT_BYTES_LIMIT:
        raise ConfigError(
            field, value,
            f"must be a whole number of bytes from 1 to {MAX_RESULT_BYTES_LIMIT:,} (4 MiB);"
            " store larger outputs elsewhere and return a reference to them",
        )
    return value


def encoded(value: Any, limit: int, job_id: int, kind: str) -> str:
    """``value`` as compact JSON text, or ResultError saying why it cannot be stored."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultError(
            job_id, kind, f"it is not JSON ({type(exc).__name__}: {exc}); return a value made"
            f" of {_TYPES} (a dataclass or datetime must be converted first)",
        ) from exc
    problem = unstorable(value, text)
    if problem is not None:
        raise ResultError(job_id, kind, problem)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise ResultError(
            job_id, kind, f"it is {size:,} bytes as JSON, over max_result_bytes ({limit:,});"
            " store large outputs elsewhere and return a reference, or raise the kind's"
            " max_result_bytes",
        )
    return text

