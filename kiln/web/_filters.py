"""The dashboard's tag, metadata and args filters: read from a query string or a form
(``tag=billing&meta=tenant=42&arg=user=ann``, each repeatable), checked by the rules of
kiln._model._tags, and written back the same way. A bad one is a 400 that names it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException

from kiln._errors import ValidationError
from kiln._model._tags import check_pairs, check_tags, parse_pair

Pairs = tuple[tuple[str, Any], ...]


def _bad(exc: ValidationError) -> HTTPException:
    return HTTPException(status_code=400, detail=str(exc))


def values(params: Mapping[str, str], name: str) -> list[str]:
    """Every non-blank value of ``name`` (a form's blank input means absent)."""
    getlist = getattr(params, "getlist", None)
    raw = getlist(name) if getlist is not None else (
        [params[name]] if name in params else [])
    return [v.strip() for v in raw if isinstance(v, str) and v.strip()]


def tags(params: Mapping[str, str]) -> tuple[str, ...]:
    try:
        return check_tags(values(params, "tag"), "the tags filter")
    except ValidationError as exc:
        raise _bad(exc) from None


def pairs(params: Mapping[str, str], name: str, what: str) -> Pairs:
    try:
        parsed = dict(parse_pair(text, f"{what} ({name}=)") for text in values(params, name))
        return tuple(check_pairs(parsed, what).items())
    except ValidationError as exc:
        raise _bad(exc) from None


def pair_text(key: str, value: Any) -> str:
    """``key=value`` that ``parse_pair`` reads back as the same value: a string that
    would read as a number or a boolean is quoted."""
    if isinstance(value, str) and parse_pair(f"k={value}", "")[1] == value:
        return f"{key}={value}"
    return f"{key}={json.dumps(value)}"
