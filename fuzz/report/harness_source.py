"""The replay harness's module-level literals, read from its source without importing it (it imports vLLM).

Invariant: ``mamba_align_replay.py`` is the one place the model, the engine's fixed arguments and a request's
defaults are written; the sim tier, the tiny model and the exporter read them here, so a bundle's test starts the
engine the sim built."""

from __future__ import annotations

import ast
import copy
import functools
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).with_name("mamba_align_replay.py")  # the one harness; a crash store holds a copy


@functools.cache
def _literals() -> dict[str, Any]:
    """Every module-level ``NAME = <literal>`` (annotated or not) of the harness."""
    found: dict[str, Any] = {}
    for node in ast.parse(HARNESS.read_text()).body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and node.value is not None:
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            try:
                found[getattr(target, "id", "")] = ast.literal_eval(node.value)
            except ValueError:
                continue  # not a literal (a type alias, a computed value)
    return found


def harness_literal(name: str) -> Any:
    """A fresh copy of the harness's literal ``name``; a name it does not define raises."""
    if name not in _literals():
        raise AssertionError(f"{HARNESS} defines no literal {name}")
    return copy.deepcopy(_literals()[name])
