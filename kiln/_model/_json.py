"""JSON text the way kiln stores it (compact, not ASCII-escaped), made fast, and the
rules a value must meet for every store to write it.

``json.JSONEncoder.encode`` builds its C encoder on every call, which costs more than
encoding a small job's args; this one is built once. It refuses NaN and infinities,
and has no circular-reference markers: a cycle ends in a RecursionError (the callers
turn it into a clear error). It is kiln's one encoder: the stores write their JSON columns
with it too (``kiln.stores._rows.dumps``). ``canonical`` is the same text with every
dict's keys sorted: what a unique key hashes, so equal args make equal keys whatever
order a producer built them in.

``unstorable`` says why encoded text is not writable by every store (a NUL, a lone
surrogate, nesting deeper than MariaDB's JSON allows): args, metadata and results all
follow it, so every producer gets the same answer whatever its database.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# lists and dicts nested deeper than this are refused: MariaDB's JSON (the CHECK of its
# JSON columns) stores at most 32 levels counting the innermost values, so 31 containers
MAX_DEPTH = 31


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _encoder(sort_keys: bool) -> Callable[[Any], str]:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - Python without the C accelerator
        slow = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                sort_keys=sort_keys)
        return slow.encode
    chunks = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", sort_keys,
                  False, False)

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


encode = _encoder(sort_keys=False)
_sorted = _encoder(sort_keys=True)


def canonical(value: Any) -> str:
    """``encode`` with every dict's keys in sorted order (as JSON keys: text)."""
    try:
        return _sorted(value)
    except TypeError:  # keys of several types (1 and "b"): sort them as the text they become
        return _sorted(_text_keys(value))


def _text_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_text_keys(v) for v in value]
    return value


def _key_text(key: Any) -> str:
    """A dict key as the JSON encoder writes it."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return json.dumps(key)
    if isinstance(key, int | float):
        return encode(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def unstorable(value: Any, text: str) -> str | None:
    """Why ``text`` (``value`` as ``encode`` wrote it) cannot be stored on every store,
    or None. Three scans of the text in C; the value is walked only when the text holds
    an escaped NUL, or more brackets than the depth allows."""
    if "\\u0000" in text and _has_nul(value):
        return ("it contains a NUL character (U+0000), which PostgreSQL cannot store in JSON;"
                " remove it or encode the data (base64)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (f"it contains {text[exc.start]!r}, a lone surrogate, which is not valid"
                    " Unicode and no store can write")
    if text.count("[") + text.count("{") > MAX_DEPTH and depth(value) > MAX_DEPTH:
        return (f"it nests lists and dicts more than {MAX_DEPTH} levels deep, which MariaDB"
                " cannot store in JSON; flatten it")
    return None


def _has_nul(value: Any) -> bool:
    """A NUL in a string or key of ``value`` (not a backslash followed by 'u0000')."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def depth(value: Any) -> int:
    """How many lists and dicts nest at the deepest point of ``value`` (a scalar: 0)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            continue
        level += 1
        deepest = max(deepest, level)
        todo.extend((v, level) for v in item if isinstance(v, dict | list | tuple))
    return deepest
