"""A tier's executor as the deciding process uses it: calls that involve a sandboxed policy run in that
policy's child; the rest run in this process on the tier's own executor.

Invariants:
- a policy loaded elsewhere (``Policy.elsewhere``) is only ever run by its child: ``run`` with it (as
  the policy, the reference it is compared with, or the reference a ``following`` policy follows) is
  one request to the child of exactly those specs (``Domains``);
- an answer that never comes is a fault of that run, never a clean run: the child exiting (any exit
  code, a signal), closing its channel or answering garbage is a ``process-exit`` fault, passing the
  run's bound (the tier's deadline plus :data:`GRACE_S`, start-up included) a ``hang`` fault; the child
  is then gone and the next request starts a fresh one;
- everything that names no sandboxed policy (the truth, the canary, configurations) runs here.
"""

from __future__ import annotations

from typing import Any

from fuzz.errors import ConfigRejected, InputError, ToolError
from fuzz.model.policies import Policy, is_builtin
from fuzz.model.result import Fault, RequestOutcome, RunResult
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import ChildFailed, ChildTimedOut, JsonChild
from fuzz.tiers import BaseExecutor, Executor

GRACE_S = 15.0  # beyond the tier's own deadline (which the child keeps): the answer's transfer, a busy machine


class SandboxFailed(ToolError):
    """The sandbox child failed in gdnfuzz's own code (one line): exit 5."""


def sandboxed_specs(policy: Policy, reference: Policy | None) -> tuple[str, ...]:
    """The specs of the non-built-in policies a run of ``policy`` (compared with ``reference``) calls."""
    specs = {policy.spec, *(p.spec for p in (reference,) if p is not None)}
    if policy.follows is not None:
        specs.add(policy.follows[0])
    return tuple(sorted(s for s in specs if not is_builtin(s)))


def run_bound(tier_deadline: float) -> float:
    """How long the parent waits for a child's run: the tier's deadline (``Executor.deadline``), which
    the child keeps, plus :data:`GRACE_S`."""
    return tier_deadline + GRACE_S


def unanswered(exc: ChildFailed, running: str) -> Fault:
    """The fault of a run whose child never answered: ``hang`` past the bound, ``process-exit`` otherwise."""
    kind = "hang" if isinstance(exc, ChildTimedOut) else "process-exit"
    return Fault(kind, f"the process running {running} {exc.how} during this run")


class Domains:
    """One child per set of sandboxed specs, the most recently used :data:`KEPT` kept running."""

    KEPT = 2

    def __init__(self, start_timeout: float, sys_path: list[str]):
        self.start_timeout, self.sys_path = start_timeout, sys_path
        self.children: dict[tuple[str, ...], JsonChild] = {}

    def child(self, specs: tuple[str, ...]) -> JsonChild:
        import json

        child = self.children.pop(specs, None) or JsonChild(
            "fuzz.sandbox.child", [json.dumps(self.sys_path)], self.start_timeout, forked=True)
        self.children[specs] = child  # most recent last
        while len(self.children) > self.KEPT:
            self.children.pop(next(iter(self.children))).close()
        return child

    def close(self) -> None:
        for child in self.children.values():
            child.close()
        self.children.clear()


class SandboxedExecutor(BaseExecutor):
    """``local`` (this process's executor for the tier), with runs of sandboxed policies sent to their child."""

    def __init__(self, local: Executor, domains: Domains):
        self.local, self.domains, self.tier = local, domains, local.tier

    def run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult:
        specs = sandboxed_specs(policy, reference)
        if not specs:
            return self.local.run(scenario, policy, reference)
        request = {"op": "run", "tier": self.tier, "scenario": scenario.to_dict(),
                   "policy": {"spec": policy.spec, "follows": policy.follows},
                   "reference": reference.spec if reference is not None else None}
        try:
            answer = self.domains.child(specs).call(request, run_bound(self.local.deadline()))
            if "run" in answer:
                result = RunResult.from_dict(answer["run"])
                result.policy = policy.name
                return result
        except ChildFailed as exc:
            return RunResult(self.tier, policy.name, scenario.scenario_id(),
                             faults=[unanswered(exc, " and ".join(specs))])
        except (KeyError, TypeError, ValueError) as exc:
            return RunResult(self.tier, policy.name, scenario.scenario_id(), faults=[
                Fault("process-exit", f"the process running {' and '.join(specs)} sent a run that does not "
                                      f"read ({type(exc).__name__}: {exc})")])
        if "rejected" in answer:
            raise ConfigRejected(str(answer["rejected"]))
        if "input_error" in answer:
            raise InputError(str(answer["input_error"]))
        raise SandboxFailed(f"the sandbox child running {' and '.join(specs)} failed: {answer.get('failed', answer)}")

    def truth(self, scenario: Scenario) -> RunResult:
        return self.local.truth(scenario)

    def outputs_differ(self, a: RequestOutcome, b: RequestOutcome) -> bool:
        return self.local.outputs_differ(a, b)

    def canary_detected(self, scenario: Scenario) -> bool | None:
        return self.local.canary_detected(scenario)

    def canary_run(self, scenario: Scenario) -> tuple[RunResult | None, bool | None]:
        return self.local.canary_run(scenario)  # type: ignore[attr-defined]

    def configuration(self, scenario: Scenario) -> dict[str, Any]:
        return self.local.configuration(scenario)

    def as_run(self, scenario: Scenario) -> Scenario:
        return self.local.as_run(scenario)

    def deadline(self) -> float:
        return self.local.deadline()

    def close(self) -> None:
        self.local.close()
