"""Where a policy that is not built in is loaded: the deciding scope open in this process.

A process that runs policies it does not vouch for opens a scope: every ``gdnfuzz`` subcommand and
the pytest plugin's replays with :func:`fuzz.sandbox.scope.deciding`, every other process that may
resolve a user's policy (harness workers, the reducer, the engine tier's child, campaign actors,
benchmarks, the test session) with :func:`fuzz.sandbox.scope.ambient`. The scope installs a
:class:`Placement` here, and ``fuzz.model.policies.resolve_policy`` hands it every spec that is not
built in; :meth:`Placement.resolve` loads the spec in a sandbox child of its own and returns a policy
whose split asks that child for each answer.

Invariant: no code of a policy that is not built in (a module, a file, a checkout's split) is ever
imported, compiled or called in a process through ``resolve_policy``: with no scope installed,
resolving one is an error, never an in-process load.
"""

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
