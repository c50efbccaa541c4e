"""Checks on input to enqueue and admin calls. Errors name the problem; nothing is written."""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from kiln._errors import ValidationError
from kiln._model._json import encode, unstorable

MAX_NAME = 200
# Unicode categories a queue, kind or rate-key name may not contain: controls (NUL, ESC
# of ANSI escapes, newlines), format characters (bidi overrides such as U+202E,
# zero-width spaces), surrogates, line and paragraph separators. Such a name cannot be
# typed, linked or printed faithfully, and can pose as another name.
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
def name_rule(limit: int) -> str:
    return (
        f"a name is 1 to {limit} characters, without control or format characters (NUL,"
        " escapes, newlines, bidi overrides, zero-width characters) or line separators, and"
        " does not start or end with whitespace"
    )


NAME_RULE = name_rule(MAX_NAME)


def check_name(what: str, value: Any, limit: int = MAX_NAME) -> str:
    """``value`` as a queue, kind or rate-key name (or a tag, with its own ``limit``), or
    a ValidationError naming the rule."""
    rule = NAME_RULE if limit == MAX_NAME else name_rule(limit)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{what} must be a non-empty string, got {value!r}: {rule}")
    if len(value) > limit:
        raise ValidationError(
            f"{what} is {len(value)} characters long; the limit is {limit}"
            f" (it starts {value[:40]!r})"
        )
    if value != value.strip():
        raise ValidationError(f"{what} {value!r} starts or ends with whitespace: {rule}")
    if not value.isprintable():  # the fast path: most names are printable
        for position, char in enumerate(value):
            if unicodedata.category(char) in FORBIDDEN_CATEGORIES:
                label = unicodedata.name(char, "a control character")
                raise ValidationError(
                    f"{what} {value!r} contains U+{ord(char):04X} ({label}) at position"
                    f" {position}: {rule}"
                )
    return value


def check_json(what: str, value: Any) -> str:
    """``value`` as the JSON text a store writes, or a ValidationError naming ``what``:
    not JSON, or JSON that some store cannot write (kiln._model._json.unstorable)."""
    try:
        text = encode(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} must be JSON-serialisable: {exc}") from exc
    except RecursionError as exc:
        raise ValidationError(
            f"{what} must be JSON-serialisable: they hold a circular reference or are nested"
            " too deeply"
        ) from exc
    problem = unstorable(value, text)
    if problem is not None:
        raise ValidationError(f"{what} cannot be stored: {problem}")
    return text


def check_max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"max_attempts must be a whole number of at least 1, got {value!r}")
    return value


def check_timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
            or not math.isfinite(value):
        raise ValidationError(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)


def check_delay(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"delay must be a number of seconds, got {value!r}")
    if value < 0:
        raise ValidationError(f"delay must not be negative, got {value!r}")
    return float(value)


def check_priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 2**31 - 1:
        raise ValidationError(f"priority must be a whole number (32-bit), got {value!r}")
    return value
