"""Tags and the metadata / args filters: the rules their values follow.

Owns the checks on a job's tags (at enqueue and in a kind's declaration) and on the
``tags``, ``metadata`` and ``args`` fields of a JobFilter. Errors name the problem and
the value; nothing is written before these checks pass. No I/O, no SQL.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from kiln._errors import ValidationError
from kiln._model._job import JSON, JobFilter
from kiln._model._validate import check_name

MAX_TAG = 100  # characters in one tag
MAX_TAGS = 20  # tags on one job (and in one filter)
MAX_KEYS = 20  # metadata or args keys in one filter
MAX_VALUE = 1000  # characters in one string value of a metadata or args filter
MAX_INT = 2**63 - 1  # the stores' JSON integers are 64-bit (SQLite's, MariaDB's)


def check_tags(value: Any, what: str = "tags") -> tuple[str, ...]:
    """``value`` (a list, tuple or set of strings) as a job's tags, in the order given
    without duplicates, or a ValidationError naming the bad tag."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValidationError(f"{what} must be a list of strings, got {value!r}")
    tags = tuple(dict.fromkeys(value))
    if len(tags) > MAX_TAGS:
        raise ValidationError(f"{what} has {len(tags)} tags; the limit is {MAX_TAGS}")
    for tag in tags:
        check_name("a tag", tag, MAX_TAG)
    return tags


def check_pairs(value: Any, what: str) -> dict[str, JSON]:
    """``value`` as the top-level key = value pairs of a metadata or args filter.

    Keys follow the name rule (and hold no quote or backslash, which the JSON paths of
    MariaDB and SQLite cannot express); values are strings, numbers or booleans, which
    every store compares alike."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"the {what} filter must be a mapping of key to value,"
                              f" got {value!r}")
    if len(value) > MAX_KEYS:
        raise ValidationError(f"the {what} filter has {len(value)} keys; the limit is"
                              f" {MAX_KEYS}")
    pairs: dict[str, JSON] = {}
    for key, item in value.items():
        check_name(f"a {what} filter key", key)
        if '"' in key or "\\" in key:
            raise ValidationError(f"a {what} filter key must not contain a quote or a"
                                  f" backslash, got {key!r}")
        pairs[key] = _scalar(what, key, item)
    return pairs


def _scalar(what: str, key: str, item: Any) -> JSON:
    if isinstance(item, bool):
        return item
    if isinstance(item, int):
        if abs(item) > MAX_INT:
            raise ValidationError(f"{what} filter {key!r}: {item} is out of the 64-bit range")
        return item
    if isinstance(item, float):
        if not math.isfinite(item):
            raise ValidationError(f"{what} filter {key!r}: {item!r} is not a finite number")
        return item
    if isinstance(item, str):
        if len(item) > MAX_VALUE:
            raise ValidationError(f"{what} filter {key!r}: the value is {len(item)}"
                                  f" characters long; the limit is {MAX_VALUE}")
        if "\x00" in item:
            raise ValidationError(f"{what} filter {key!r}: the value contains NUL")
        return item
    raise ValidationError(
        f"{what} filter {key!r}: compare with a string, a number or a boolean,"
        f" got {item!r}"
    )


def check_filter(f: JobFilter) -> JobFilter:
    """``f`` with its tags, metadata and args checked (a ValidationError otherwise) and
    made plain: a tuple of distinct tags, dicts of pairs."""
    if not (f.tags or f.metadata or f.args):
        return f
    return dataclasses.replace(
        f, tags=check_tags(f.tags, "the tags filter") if f.tags else (),
        metadata=check_pairs(f.metadata, "metadata") if f.metadata else {},
        args=check_pairs(f.args, "args") if f.args else {},
    )


def parse_pair(text: str, what: str) -> tuple[str, JSON]:
    """``key=value`` as the CLI and the dashboard take it: the value is read as JSON
    when it is a number, a boolean or a quoted string, else taken as it is (so
    ``tenant=42`` compares with the number 42, ``tenant="42"`` with the string)."""
    import json

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValidationError(f"{what} filters are key=value, got {text[:60]!r}")
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw
    if parsed is None or isinstance(parsed, list | dict):
        parsed = raw
    return key.strip(), parsed
