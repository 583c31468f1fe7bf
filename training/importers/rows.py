"""``train import``'s fast path: a trace's trajectory made of msgspec structs and written by msgspec,
byte for byte as the pydantic models write it, with no model built.

The structs mirror the models' fields (generated from them, in their order; a field that is None
is left out, as ``model_dump_json(exclude_none=True)`` leaves it out). Each struct checks its
values on creation: a value the models would convert or refuse (a token count given as text, a
float that is not finite, a non-text role) makes :func:`trajectory` answer None, and the caller
builds the models as before, with their conversions and their errors. A struct trajectory that
msgspec cannot write (a lone surrogate in a text) is written through the models (:func:`row`).
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

import msgspec
from pydantic import BaseModel

from aegis_probe.storage.otlp_json import SpanRecord
from aegis_probe.trajectory import (
    Kinds, Labels, LLMCall, Message, Outcome, Step, ToolCall, Trajectory, Usage, _build,
)

from .base import content_identity, identity


class Odd(Exception):
    """A value the models would convert or refuse: the trace is built with the models."""


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON that msgspec writes as pydantic does (finite floats, text keys)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _check(annotation: Any, v: str, names: dict[str, Any]) -> str:
    """A Python expression of ``v``: whether its value is one a model field of ``annotation`` keeps
    as it is (the names it uses put in ``names``)."""
    if isinstance(annotation, type) and (annotation in names.values() or issubclass(annotation, BaseModel)):
        names.setdefault(annotation.__name__, annotation)
        return f"type({v}) is {annotation.__name__}"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if all(a in (str, int, float, bool, type(None)) for a in args):
            exact = f"t{len(names)}"
            names[exact] = args
            return f"(type({v}) in {exact}" + (f" and (type({v}) is not float or isfinite({v})))" if float in args else ")")
        if str in args and all(a is str or typing.get_origin(a) is typing.Literal for a in args):
            return f"type({v}) is str"
    if origin is list and args:
        if isinstance(args[0], type) and issubclass(args[0], BaseModel):  # made by the build, each checked when made
            return f"type({v}) is list"
        return f"(type({v}) is list and all({_check(args[0], 'x', names)} for x in {v}))"
    if origin is dict and args and args[0] is str:
        return f"(type({v}) is dict and plain({v}))"
    if annotation in (str, int, bool):
        return f"type({v}) is {annotation.__name__}"
    if annotation is float:
        return f"(type({v}) is float and isfinite({v}))"
    raise TypeError(f"no fast check for a field of type {annotation!r}")  # a new kind of field: add it here


def _mirror(model: type[BaseModel], structs: dict[type, type]) -> type:
    """A struct of ``model``'s fields in its order, None left out when written; checked on creation."""
    hints = typing.get_type_hints(model)
    fields: list[Any] = [(name, Any, None) if info.default is None else (name, Any)
                         for name, info in model.model_fields.items()]
    names: dict[str, Any] = {"plain": _plain, "isfinite": math.isfinite, "Odd": Odd,
                             **{m.__name__: st for m, st in structs.items()}}
    test = " and ".join(_check(hints[name], f"self.{name}", names) for name in model.model_fields)
    code = f"def __post_init__(self):\n    if not ({test}):\n        raise Odd({model.__name__!r})\n"
    exec(code, names)  # noqa: S102 - the checks of the model's own field types, one expression
    struct = msgspec.defstruct(model.__name__, fields, kw_only=True, omit_defaults=True,
                               namespace={"__post_init__": names["__post_init__"]})
    structs[model] = struct
    return struct


_STRUCTS: dict[type, type] = {}
for _model in (Message, ToolCall, LLMCall, Usage, Outcome, Step, Trajectory):
    _mirror(_model, _STRUCTS)
STRUCTS = Kinds(*(_STRUCTS[m] for m in (Trajectory, Step, Message, ToolCall, LLMCall, Usage, Outcome)))
TrajectoryStruct = _STRUCTS[Trajectory]


def trajectory(spans: list[SpanRecord]) -> Any:
    """The trajectory of one trace's spans as structs, or None where the models would convert a
    value or fail (build it with :meth:`Trajectory.from_spans`, which says why)."""
    try:
        return _build(spans, STRUCTS)
    except Exception:  # noqa: BLE001 - any failure: the models' build raises it as they always have
        return None


def _labels(value: Any) -> Any:
    if isinstance(value, Labels):
        return value.model_dump(exclude_none=True)
    raise TypeError(f"cannot write {type(value).__name__}")


_encode = msgspec.json.Encoder(enc_hook=_labels).encode


def row(traj: Any) -> tuple[tuple[str, str], str]:
    """``(identity, JSON line)`` of a struct trajectory, as :func:`.base.identity` and
    ``model_dump_json(exclude_none=True)`` make them of its models."""
    try:
        line = _encode(traj)
        content = _encode(msgspec.structs.replace(
            traj, run_id=None, metadata={k: v for k, v in traj.metadata.items() if k != "file"}))
    except (UnicodeEncodeError, msgspec.EncodeError):  # a lone surrogate: the models write it (or fail) as they do
        model = to_model(traj)
        return identity(model), model.model_dump_json(exclude_none=True)
    return content_identity(traj.trace_id, traj.run_id, content), line.decode()


def to_model(traj: Any) -> Trajectory:
    """The models of a struct trajectory."""
    return Trajectory.model_validate(msgspec.to_builtins(traj, enc_hook=_labels))
