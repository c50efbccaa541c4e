"""A kind named by an object rather than a string: its name and, where known, the type
of its args. ``kiln.JobHandle`` (``@app.job``) and ``kiln.JobKind`` (``kiln.kind(...)``,
for producers that hold no handler) are such refs; wherever a kind's name goes
(``enqueue``, ``enqueue_many`` items, chain and fan-in steps) a ref goes too. Owns no I/O.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from kiln._model import _args
from kiln._model import _validate as v

ArgsT = TypeVar("ArgsT")


class KindRef(Generic[ArgsT]):
    """A kind's name (``kind``) and the type of its args (``args_type``: a TypedDict, a
    dataclass, a Pydantic model; None: not known here). A mapping given for a dataclass
    or a model is checked against it at enqueue (``resolve``)."""

    kind: str
    args_type: Any

    def __init__(self, kind: str, args_type: Any = None) -> None:
        v.check_name("kind", kind)
        self.kind = kind
        self.args_type = args_type

    def __repr__(self) -> str:
        name = getattr(self.args_type, "__name__", self.args_type)
        return f"<{type(self).__name__} {self.kind!r} {name}>"


def resolve(kind: str | KindRef[Any], args: Any) -> tuple[str, Any]:
    """The name and args to build a job from: a ref's name, and a mapping given
    for its dataclass or model checked against it (``kiln._model._args``)."""
    if isinstance(kind, KindRef):
        if kind.args_type is not None and args is not None:
            args = _args.encode(kind.args_type, kind.kind, args)
        return kind.kind, args
    return kind, args


def kind_name(kind: str | KindRef[Any]) -> str:
    """The name a kind is given by: a string, or a ref's (a ``JobKind``'s, a ``JobHandle``'s)."""
    return kind.kind if isinstance(kind, KindRef) else kind
