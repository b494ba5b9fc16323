"""File formats as annotated types, validated by pydantic, with faults in gdnfuzz's one-line form.
Invariants: one fault, the first met depth first in field order (unknown keys first), as (dotted field, innermost
:class:`Says` message or a default); a validator's FieldError names its field below its place; :func:`json_schema`
is the schema of the very types the readers check."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, TypeVar

import typing_extensions
from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from fuzz.errors import FieldError, InputError

T = TypeVar("T")
Fail = Callable[[str, str], InputError]
UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")  # pydantic's unknown key, dataclass and TypedDict
WRONG_KIND = ("list_type", "tuple_type", "dict_type", "dataclass_type", "enum", "int_type", "float_type",
              "string_type", "bool_type")  # pydantic's value of another kind than its place's type


@dataclass(frozen=True)
class Says:
    """``Annotated`` metadata: the message of any fault at or under this field (``missing``: also when missing)."""

    message: Callable[[Any], str]
    missing: bool = False


def validate(schema: type[T] | Any, value: Any, fail: Fail, *, as_json: bool = False) -> T:
    """``value`` as ``schema`` (``as_json``: as its JSON text, strictly); a fault is ``fail(field, message)``."""
    try:
        if as_json:
            return _adapter(schema).validate_json(json.dumps(value), strict=True)
        return _adapter(schema).validate_python(value)
    except ValidationError as exc:
        field, message = _describe(schema, value, _first(exc.errors(include_url=False)))
        raise fail(field, message) from None


def json_schema(schema: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the values :func:`validate` accepts as ``schema``."""
    return _adapter(schema).json_schema()


def field_path(loc: tuple[str | int, ...]) -> str:
    """``("requests", 2, "id")`` as ``requests[2].id``; the value itself is ``<top>``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "<top>"


@functools.cache
def _adapter(schema: Any) -> TypeAdapter[Any]:
    return TypeAdapter(schema)


def _first(errors: list[ErrorDetails]) -> ErrorDetails:
    """The fault a reader meets first: an enclosing object's unknown key before pydantic's first listed fault."""
    first = errors[0]
    enclosing = [e for e in errors if e["type"] in UNKNOWN and first["loc"][:len(e["loc"]) - 1] == e["loc"][:-1]]
    return min(enclosing, key=lambda e: len(e["loc"]), default=first)


def _describe(schema: Any, value: Any, error: ErrorDetails) -> tuple[str, str]:
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, FieldError):
        parts = [field_path(error["loc"])] if error["loc"] else []
        return ".".join(parts + [cause.field_path] if cause.field_path else parts) or "<top>", cause.message
    if error["type"] in UNKNOWN:
        return field_path(error["loc"]), "unknown field"
    (loc, says, found), expected = _blame(schema, value, error["loc"])
    if says is None or error["type"] == "missing" and not (says.missing and loc == error["loc"]):
        if error["type"] == "missing":
            return field_path(error["loc"]), "missing"
        wrong = error["type"] in WRONG_KIND and _wrong_kind(expected, functools.reduce(_child, error["loc"], value))
        return field_path(error["loc"]), wrong or error["msg"]
    return field_path(loc), says.message(found)


_Blame = tuple[tuple[str | int, ...], Says | None, Any]


def _blame(tp: Any, value: Any, loc: tuple[str | int, ...]) -> tuple[_Blame, Any]:
    """(place, innermost Says on ``tp``'s path to ``loc``, value there), and ``loc``'s own type (None if unknown)."""
    best: _Blame = ((), None, value)
    depth = 0
    while True:
        tp, says = _unwrap(tp)
        if says is not None:
            best = (loc[:depth], says, value)
        if depth == len(loc):
            return best, tp
        key, origin, args = loc[depth], typing.get_origin(tp), typing.get_args(tp)
        if origin is dict and loc[depth + 1:depth + 2] == ("[key]",):  # a key of the object is at fault
            _, key_says = _unwrap(args[0])
            return ((loc[:depth], key_says, key) if key_says else best), None
        if dataclasses.is_dataclass(tp) or typing_extensions.is_typeddict(tp):
            tp = _hints(tp).get(key)
        elif origin in (list, tuple, dict):
            tp = args[-1] if origin is dict else args[0]
        else:  # a union's member, named by pydantic
            return best, None
        value = _child(value, key)
        depth += 1


def _wrong_kind(tp: Any, value: Any) -> str | None:
    """``value`` refused as ``tp``, worded by the kind ``tp`` is (None for a type of no plain JSON kind)."""
    if typing.get_origin(tp) in (list, tuple):
        return f"expected a list, got {_kind(value)}"
    if typing.get_origin(tp) is dict or dataclasses.is_dataclass(tp) or typing_extensions.is_typeddict(tp):
        return f"expected an object, got {_kind(value)}"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return f"expected one of {', '.join(str(m.value) for m in tp)}, got {_short(value)}"
    return f"expected {tp.__name__}, got {_short(value)}" if tp in (int, float, str, bool) else None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _unwrap(tp: Any) -> tuple[Any, Says | None]:
    """``tp`` without its ``Annotated`` layers and its ``| None``, and the innermost Says among them."""
    says = None
    while True:
        if typing.get_origin(tp) in (typing.Required, typing.NotRequired):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is Annotated:
            says = next((m for m in reversed(tp.__metadata__) if isinstance(m, Says)), says)
            tp = tp.__origin__
        elif typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
            options = [o for o in typing.get_args(tp) if o is not type(None)]
            if len(options) != 1:
                return tp, says
            tp = options[0]
        else:
            return tp, says


def _child(value: Any, key: str | int) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return None


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)
