"""JSON text the way kiln stores it (compact, not ASCII-escaped), made fast.

``json.JSONEncoder.encode`` builds its C encoder on every call, which costs more than
encoding a small job's args; this one is built once. It refuses NaN and infinities,
and has no circular-reference markers: a cycle ends in a RecursionError (the callers
turn it into a clear error). The text is the same ``kiln.stores._rows.dumps`` makes.
"""

from __future__ import annotations

import json
from typing import Any


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
if _C_ENCODER is not None:
    _chunks = _C_ENCODER(
        None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def encode(value: Any) -> str:
        return "".join(_chunks(value, 0))
else:  # pragma: no cover - Python without the C accelerator
    _slow = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def encode(value: Any) -> str:
        return _slow.encode(value)
