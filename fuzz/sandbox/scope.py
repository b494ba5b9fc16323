"""The deciding scope: while it is open this process runs no policy code but the built-ins; every other policy
is loaded in sandbox children bound to it (``fuzz.sandbox.child``).

``deciding()`` wraps every subcommand and the plugin's runs; :func:`ambient` opens one for a process's life.
Invariants: a policy that cannot be loaded is a :class:`~fuzz.model.policies.PolicyError` naming it (exit 2);
a scope's children, and all they started, are gone when it closes; scopes nest (the innermost governs).
"""

from __future__ import annotations

import atexit
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fuzz.model import placement
from fuzz.model.deadline import seconds_from_env
from fuzz.model.policies import Policy, PolicyError, named
from fuzz.sandbox.channel import ChildFailed, JsonChild
from fuzz.sandbox.containment import settle
from fuzz.sandbox.remote import RemoteSplit
from fuzz.sandbox.views import Lookup

LOAD_TIMEOUT_S = 180.0  # start a child, import the policy (which usually imports vLLM) on a loaded machine
LOAD_TIMEOUT_ENV = "GDNFUZZ_LOAD_TIMEOUT_S"
KEPT = 8  # children kept running; an older one is stopped and started again when its policy is next called
CALLS, TAPE = "calls", "tape"  # a spec's two children: one call at a time, and whole runs (``fuzz.sandbox.tape``)


def load_timeout() -> float:
    """How long loading a candidate may take: ``$GDNFUZZ_LOAD_TIMEOUT_S``, else :data:`LOAD_TIMEOUT_S`."""
    return seconds_from_env(LOAD_TIMEOUT_ENV, LOAD_TIMEOUT_S)


class DecidingScope:
    """The :class:`~fuzz.model.placement.Placement` of a deciding process: sandbox children per spec, each bound
    to it at start (:data:`CALLS`, and :data:`TAPE` once a run asks for a tape)."""

    def __init__(self) -> None:
        self.sys_path = list(sys.path)
        self.children: dict[tuple[str, str], JsonChild] = {}  # most recently used last
        self.policies: dict[str, Policy] = {}

    def child(self, spec: str, role: str = CALLS) -> JsonChild:
        child = self.children.pop((spec, role), None) or JsonChild(
            "fuzz.sandbox.child", [json.dumps(self.sys_path), spec], load_timeout(), forked=True)
        self.children[(spec, role)] = child
        while len(self.children) > KEPT:
            self.children.pop(next(iter(self.children))).close()
        return child

    def resolve(self, spec: str) -> Policy:
        if spec not in self.policies:
            self.policies[spec] = self._load(spec)
        return self.policies[spec]

    def _load(self, spec: str) -> Policy:
        child = self.child(spec)
        try:
            answer = child.call({"op": "resolve"}, load_timeout())
        except ChildFailed as exc:
            raise PolicyError(f"policy {spec}: the process loading it {exc.how}") from None
        if "policy" not in answer:
            child.close()
            raise PolicyError(str(answer.get("input_error") or f"policy {spec}: cannot be loaded ({answer})"))
        name, description = named(spec)  # from the spec here: the child says only where it found the split
        source = answer["policy"].get("source") if isinstance(answer["policy"], dict) else None
        found = (source[0], source[1]) if isinstance(source, list) and len(source) == 2 and \
            isinstance(source[0], str) and type(source[1]) is int else (spec.rsplit(":", 1)[0], 1)
        return Policy(name, spec, _KeptSplit(self, spec), description, sandboxed=True, source=found)

    def close(self) -> None:
        """Stop every child (each returns once all it started is gone)."""
        for child in self.children.values():
            child.close()
        self.children.clear()

    @contextmanager
    def installed(self) -> Iterator[DecidingScope]:
        """This scope governs the block; its children stay warm after it (:meth:`close` stops them)."""
        placement.install(self)
        try:
            yield self
        finally:
            placement.uninstall(self)


class _KeptSplit(RemoteSplit):
    """A sandboxed split whose child is the scope's current one for its spec (started again after it was
    stopped: evicted, or ended by a fault)."""

    def __init__(self, scope: DecidingScope, spec: str):
        self.scope = scope
        super().__init__(scope.child(spec), spec)

    def tape_child(self) -> JsonChild:
        return self.scope.child(self.spec, TAPE)

    def ask_child(self, roots: dict[str, Any], args: list[int]) -> tuple[dict[str, Any], Lookup]:
        self.child = self.scope.child(self.spec)
        return super().ask_child(roots, args)


@contextmanager
def deciding() -> Iterator[DecidingScope]:
    """Open a deciding scope for the block (module docstring), its children stopped after it."""
    scope = DecidingScope()
    try:
        with scope.installed():
            yield scope
    finally:
        scope.close()


_ambient: list[DecidingScope] = []


def ambient() -> DecidingScope:
    """A deciding scope for the rest of this process's life (opened once; its children stopped at exit).
    Scopes opened later with :func:`deciding` govern inside their blocks."""
    if not _ambient:
        scope = DecidingScope()
        placement.install(scope)
        atexit.register(scope.close)
        _ambient.append(scope)
    return _ambient[0]


def stop_children() -> None:
    """Stop the children of every scope open here, and all they started, then wait for every other keeper
    below this one (a harness worker's, reparented here by ``fuzz.sandbox.containment.adopting_orphans``) to
    end, killing what is left (``settle``): before a command writes what it found, nothing a candidate
    started can still touch it. The next call starts the children again."""
    for scope in [*_ambient, placement.current()]:
        if isinstance(scope, DecidingScope):
            scope.close()
    settle()
