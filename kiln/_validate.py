"""Checks on input to enqueue and admin calls. Errors name the problem; nothing is written."""

from __future__ import annotations

import json
import math
from typing import Any

from kiln._errors import ValidationError

MAX_NAME = 200


def check_name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > MAX_NAME:
        raise ValidationError(f"{what} is {len(value)} characters long; the limit is {MAX_NAME}")
    return value


def check_json(what: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} must be JSON-serialisable: {exc}") from exc


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
