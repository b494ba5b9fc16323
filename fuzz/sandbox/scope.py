"""The deciding scope: while it is open, this process decides verdicts and runs no policy code but the
built-ins (``fuzz.model.placement``); every other policy is loaded and run in a sandbox child.

``with deciding(): ...`` wraps every ``gdnfuzz`` subcommand (``fuzz.cli.main``) and the pytest plugin's
runs. Invariants: a spec is loaded in the child of exactly its own domain (so a module that misbehaves
once loaded cannot reach the runs of another); a policy that cannot be loaded there (it raises, exits,
hangs or is not a split) is a :class:`~fuzz.model.policies.PolicyError` naming it, exit 2; the scope's
children are stopped when it closes; scopes nest (the innermost governs).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fuzz.model import placement
from fuzz.model.deadline import seconds_from_env
from fuzz.model.policies import Policy, PolicyError, runs_elsewhere
from fuzz.sandbox.channel import ChildFailed
from fuzz.sandbox.executor import Domains, SandboxedExecutor
from fuzz.tiers import Executor

LOAD_TIMEOUT_S = 180.0  # start a child, import the policy (which usually imports vLLM) on a loaded machine
LOAD_TIMEOUT_ENV = "GDNFUZZ_LOAD_TIMEOUT_S"


def load_timeout() -> float:
    """How long loading a candidate may take: ``$GDNFUZZ_LOAD_TIMEOUT_S``, else :data:`LOAD_TIMEOUT_S`."""
    return seconds_from_env(LOAD_TIMEOUT_ENV, LOAD_TIMEOUT_S)


class DecidingScope:
    """The :class:`~fuzz.model.placement.Placement` of a deciding process."""

    def __init__(self) -> None:
        self.domains = Domains(load_timeout(), list(sys.path))
        self.executors: dict[str, SandboxedExecutor] = {}
        self.policies: dict[str, Policy] = {}

    def resolve(self, spec: str) -> Policy:
        if spec not in self.policies:
            self.policies[spec] = self._load(spec)
        return self.policies[spec]

    def _load(self, spec: str) -> Policy:
        try:
            answer = self.domains.child((spec,)).call({"op": "resolve", "spec": spec}, load_timeout())
        except ChildFailed as exc:
            raise PolicyError(f"policy {spec}: the process loading it {exc.how}") from None
        if "policy" not in answer:
            raise PolicyError(str(answer.get("input_error") or f"policy {spec}: cannot be loaded ({answer})"))
        found: dict[str, Any] = answer["policy"]
        source = found.get("source")
        return Policy(str(found["name"]), spec, runs_elsewhere(spec), str(found.get("description", "")),
                      found.get("checkout"), elsewhere=True,
                      source=(str(source[0]), int(source[1])) if source else None)

    def executor(self, tier: str, local: Executor) -> Executor:
        if tier not in self.executors:
            self.executors[tier] = SandboxedExecutor(local, self.domains)
        return self.executors[tier]

    def close(self) -> None:
        self.domains.close()

    @contextmanager
    def installed(self) -> Iterator[DecidingScope]:
        """This scope governs the block; its children stay warm after it (:meth:`close` stops them)."""
        placement.install(self)
        try:
            yield self
        finally:
            placement.uninstall(self)


@contextmanager
def deciding() -> Iterator[DecidingScope]:
    """Open a deciding scope for the block (module docstring), its children stopped after it."""
    scope = DecidingScope()
    try:
        with scope.installed():
            yield scope
    finally:
        scope.close()
