"""Where a non-built-in policy is loaded: the deciding scope open in this process (``fuzz.sandbox.scope``).
Invariant: a non-built-in policy's code never runs in a process through ``resolve_policy``: the scope's
:class:`Placement` loads it in a sandbox child; with none installed, resolving it is an error."""

from __future__ import annotations

from typing import Any, Protocol


class Placement(Protocol):
    def resolve(self, spec: str) -> Any:
        """The policy ``spec`` names, loaded in a sandbox child (a ``fuzz.model.policies.Policy``)."""


_installed: list[Placement] = []


def current() -> Placement | None:
    """The innermost installed placement (None: none is open in this process)."""
    return _installed[-1] if _installed else None


def install(placement: Placement) -> None:
    _installed.append(placement)


def uninstall(placement: Placement) -> None:
    _installed.remove(placement)
