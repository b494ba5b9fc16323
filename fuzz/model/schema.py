"""File formats as annotated types, validated by pydantic, with faults in gdnfuzz's one-line form.

A reader declares its format as types (stdlib dataclasses and TypedDicts whose fields are ``Annotated``
with pydantic's constraints and a :class:`Says`), hands a parsed JSON value (``fuzz.model.json_input``)
to :func:`validate`, and gets the typed value or one ``fail(field, message)``. :func:`json_schema` is
the JSON Schema of the same types, so the published schema is the one the readers check.

Invariants:

- one fault is reported, the first a reader meets going depth first in field order, where an
  object's unknown keys come before its fields;
- the field is the fault's place in dotted form (``requests[2].max_tokens``, ``<top>`` for the value
  itself) and the message is the innermost :class:`Says` on the way there, given the value at its
  field; without one, an unknown key is ``unknown field``, a missing one ``missing``, and a value of
  the wrong kind names the kind its place expects (``expected a list, got a string``, ``expected an
  object, got null``, ``expected int, got '3'``, ``expected one of ok, unsupported, got 'x'``);
- ``as_json``: the value is checked as the JSON text it was parsed from, strictly (pydantic's strict
  JSON mode), so its types need no ``Strict()`` of their own: no bool for an int, no ``"3"`` for a
  number, an array for a tuple, an enum's value for the enum, an integer for a float (as a float);
- a validator (``PlainValidator``, ``AfterValidator``) that raises a :class:`~fuzz.errors.FieldError`
  names its field below the place it validates (``""``: that place itself), with its own message.
"""

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
    """``Annotated`` metadata: the message of any fault at or under this field, made from its value;
    ``missing``: a required field that is missing gets it too (made from None), not ``missing``."""

    message: Callable[[Any], str]
    missing: bool = False


def validate(schema: type[T] | Any, value: Any, fail: Fail, *, as_json: bool = False) -> T:
    """``value`` as ``schema`` (see the module invariants; ``as_json``: as its JSON text, strictly); a fault
    is ``fail(field, message)``."""
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
    """The fault a reader meets first: pydantic lists an object's fields in order, then its unknown
    keys, so the first listed fault gives way to an unknown key of an object that encloses it."""
    first = errors[0]
    enclosing = [e for e in errors if e["type"] in UNKNOWN and first["loc"][:len(e["loc"]) - 1] == e["loc"][:-1]]
    return min(enclosing, key=lambda e: len(e["loc"]), default=first)


def _describe(schema: Any, value: Any, error: ErrorDetails) -> tuple[str, str]:
    """The fault ``error`` of ``value`` as (field, message)."""
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
    """The innermost :class:`Says` on ``tp``'s path to ``loc``, the place it covers and the value there;
    and the type ``loc`` itself has (None where pydantic names a union's member or an object's key)."""
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
    """A JSON value's kind: ``an object``, ``a list``, ``a string``, ``a boolean``, ``null``, ``a number``."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _short(value: Any) -> str:
    """``repr(value)`` cut to 40 characters."""
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
    """``value[key]``, or None where it has none (a missing field)."""
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return None


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    return typing.get_type_hints(tp, include_extras=True)
