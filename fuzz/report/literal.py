"""Plain data as Python source laid out as ``ruff format`` would, so a file written with it is already formatted.

Invariant: a collection is on one line where it fits in ``width``, else one item a line with a trailing comma and its
closing bracket alone; strings use double quotes."""

from __future__ import annotations

import json
from typing import Any

WIDTH = 88  # vLLM's line length


def flat(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flat(k)}: {flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "(" + ", ".join(flat(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(flat(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    raise TypeError(f"not plain data: {type(value).__name__}")


def layout(value: Any, indent: int = 0, head: str = "", tail: str = "", width: int = WIDTH) -> list[str]:
    """The lines of ``head`` + ``value`` + ``tail`` at ``indent`` spaces."""
    pad = " " * indent
    line = f"{pad}{head}{flat(value)}{tail}"
    if len(line) <= width or not isinstance(value, (dict, list, tuple)) or not value:
        return [line]
    items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    opening, closing = "{}" if isinstance(value, dict) else "()" if isinstance(value, tuple) else "[]"
    lines = [f"{pad}{head}{opening}"]
    for key, item in items:
        lines += layout(item, indent + 4, "" if key is None else f"{flat(key)}: ", ",", width)
    return [*lines, f"{pad}{closing}{tail}"]
