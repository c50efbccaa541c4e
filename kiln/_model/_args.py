"""Typed job args: the type a handler declares (``job: kiln.Job[EmailArgs]``), its
encoding to JSON at enqueue and its decoding on the worker.

An args type is a TypedDict (stored as the dict it is), a dataclass (stored as
``dataclasses.asdict``, rebuilt with ``cls(**args)``; a field whose type is itself a
dataclass is rebuilt too) or a Pydantic model (validated and stored as
``model_dump(mode="json")``, rebuilt with ``model_validate``). Any other type, and a
handler that declares none, keeps the args as JSON gives them. Pydantic is never
imported: a model is recognised by its ``model_validate`` and ``model_dump``.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

from kiln._errors import ValidationError

_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def is_model(tp: Any) -> bool:
    """A Pydantic model class (v2)."""
    return isinstance(tp, type) and hasattr(tp, "model_validate") and hasattr(tp, "model_dump")


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def decodes(tp: Any) -> bool:
    """Whether args of this declared type are rebuilt on the worker."""
    return is_model(tp) or is_dataclass_type(tp)


def to_json(args: Any) -> Any:
    """``args`` as JSON-able data: a dataclass instance as its dict, a Pydantic model
    as its JSON-mode dump; anything else as given (checked later, as before)."""
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        return dataclasses.asdict(args)
    if is_model(type(args)):
        return args.model_dump(mode="json")
    return args


def encode(tp: Any, kind: str, args: Any) -> Any:
    """``args`` for a kind whose handler declares ``tp``, as JSON-able data: a mapping
    given for a dataclass or a model is checked against it first (a model validates
    it), so a wrong shape is refused at enqueue, not on the worker."""
    if tp is None and args.__class__ in _PLAIN:  # the common case, per job of a batch
        return args
    if isinstance(args, dict) and decodes(tp):
        try:
            args = tp.model_validate(args) if is_model(tp) else _dataclass(tp, args)
        except Exception as exc:  # pydantic's ValidationError, TypeError
            raise ValidationError(f"args of kind {kind!r} do not fit {tp.__name__}: {exc}") \
                from exc
    return to_json(args)


def decode(tp: Any, args: Any) -> Any:
    """The stored ``args`` as the handler's declared type (see the module)."""
    if is_model(tp):
        return tp.model_validate(args)
    if is_dataclass_type(tp) and isinstance(args, dict):
        return _dataclass(tp, args)
    return args


def _dataclass(tp: Any, args: dict[str, Any]) -> Any:
    try:
        hints = typing.get_type_hints(tp)
    except Exception:  # an unresolvable annotation: no nested rebuild
        hints = {}
    values = {name: _dataclass(hints[name], value)
              if is_dataclass_type(hints.get(name)) and isinstance(value, dict) else value
              for name, value in args.items()}
    return tp(**values)


def declared_args(handler: Any) -> Any:
    """The args type a handler declares on its first parameter (``kiln.Job[T]`` gives
    ``T``), or None. Resolved when the kind is registered, in the handler's module: a
    type defined inside a function, after the handler, or imported under
    ``TYPE_CHECKING`` only cannot be resolved then (with ``from __future__ import
    annotations``), and its args stay as JSON gives them."""
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params:
        return None
    annotation = params[0].annotation
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        target = getattr(handler, "__func__", handler)
        namespace = dict(getattr(inspect.unwrap(target), "__globals__", {}))
        try:
            annotation = eval(annotation, namespace)  # the handler's own annotation
        except Exception:  # NameError: see the docstring
            return None
    if getattr(typing.get_origin(annotation), "__kiln_job__", False):  # kiln.Job[T]
        found = typing.get_args(annotation)
        return found[0] if found else None
    return None
