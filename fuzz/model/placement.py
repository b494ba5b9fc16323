"""Where a policy's code runs in this process: here (the default), or in sandbox children while a
deciding scope is open.

A command that decides a verdict (every ``gdnfuzz`` subcommand, the pytest plugin) opens a scope with
:func:`fuzz.sandbox.deciding`, which installs a :class:`Placement` here. While one is installed:

- ``fuzz.model.policies.resolve_policy`` hands a spec that is not built in to :meth:`Placement.resolve`,
  which loads it in a child process and returns a policy whose split runs only there;
- ``fuzz.tiers.executor_for`` hands each tier's executor to :meth:`Placement.executor`, which runs
  every call involving such a policy in that child and everything else here.

Invariant: while a placement is installed, no code of a policy that is not built in (a module, a file,
a checkout's split, a branch) is imported, compiled or called in this process. Built-in policies
(gdnfuzz's own and the installed vLLM's split) run here. Without one (fuzzing workers, the sandbox
child itself, library calls) everything runs in-process, as the supervisor or the scope watching that
process expects.
"""

from __future__ import annotations

from typing import Any, Protocol


class Placement(Protocol):
    def resolve(self, spec: str) -> Any:
        """The policy ``spec`` names, loaded elsewhere (a ``fuzz.model.policies.Policy``)."""

    def executor(self, tier: str, local: Any) -> Any:
        """The executor this process uses for ``tier``, given the in-process one."""


_installed: list[Placement] = []


def current() -> Placement | None:
    """The innermost installed placement (None: policy code runs in this process)."""
    return _installed[-1] if _installed else None


def install(placement: Placement) -> None:
    _installed.append(placement)


def uninstall(placement: Placement) -> None:
    _installed.remove(placement)
