"""Whole-branch mode on the sim tier: a checkout's scheduling code in a candidate process of its own.

``BranchRunner(checkout).run(scenario)`` ships the scenario to a child interpreter whose import
system serves the modules ``fuzz.model.checkout.overlay_modules`` lists (``vllm/v1/core/**``,
``vllm/v1/request.py``, ``vllm/v1/kv_cache_interface.py``) from the checkout instead of the installed
vLLM (``workers.sim.branch_child``), runs it there on the sim tier under the branch's own split (the
``vllm`` policy, which reads the split off whatever ``Scheduler`` is imported), and gets the
``RunResult`` back as JSON over ``fuzz.sandbox.channel`` (never pickle: the branch's code is not trusted).

Invariants:
- Isolation: the reference and the truth keep running in the caller on the installed vLLM; no
  module of the checkout is ever imported into the caller.
- The child installs its finder before anything imports vLLM, and never writes bytecode into the
  checkout.
- Every wait is bounded: loading the branch by ``fuzz.sandbox.scope.load_timeout``, a run by the tier's deadline plus
  the sandbox's grace (``fuzz.sandbox.executor.run_bound``).
- A branch that needs something the installed vLLM lacks (a name it imports, a module it expects), or
  whose loading exits or passes its bound, fails at start with :class:`BranchError` (exit 2), one line
  saying what happened; one that reaches for an attribute or module the installed vLLM lacks while a
  scenario runs fails the same way then (``fuzz.model.checkout.unfit_for_installed``), never a finding; an exception while a scenario runs is a fault of that run, as on the installed
  side, and a child that exits or hangs during a run is a ``process-exit`` or ``hang`` fault.
"""

from __future__ import annotations

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import CheckoutMismatch
from fuzz.model.deadline import deadline_seconds
from fuzz.model.result import Fault, RunResult
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import ChildFailed, JsonChild
from fuzz.sandbox.executor import run_bound, unanswered
from fuzz.sandbox.scope import load_timeout


class BranchError(CheckoutMismatch):
    """The checkout's scheduling code cannot run on the installed vLLM (one line says what it lacks)."""


class BranchRunner:
    """The caller's side: one warm child per checkout, started on first use and after it is gone."""

    def __init__(self, checkout: str, start_timeout: float | None = None):
        self.checkout = checkout
        self.child = JsonChild("workers.sim.branch_child", [checkout], start_timeout or load_timeout())

    def _start(self) -> None:
        try:
            ready = self.child.start()
        except ChildFailed as exc:
            raise BranchError(f"branch:{self.checkout}: the process loading the branch {exc.how}") from None
        if "error" in ready:
            self.child.close()
            raise BranchError(f"branch:{self.checkout}: {ready['error']}")

    def run(self, scenario: Scenario, policy_name: str) -> RunResult:
        """``scenario`` under the branch's whole scheduling code; a child that never answers is a fault."""
        self._start()
        try:
            answer = self.child.call({"scenario": scenario.to_dict()}, run_bound(deadline_seconds()))
        except ChildFailed as exc:
            return RunResult(tier="sim", policy=policy_name, scenario_id=scenario.scenario_id(),
                             faults=[unanswered(exc, f"branch:{self.checkout}")])
        if "run" in answer:
            result = RunResult.from_dict(answer["run"])
            result.policy = policy_name
            return result
        if "rejected" in answer:
            raise ConfigRejected(str(answer["rejected"]))
        if "unfit" in answer:
            raise BranchError(f"branch:{self.checkout}: {answer['unfit']}")
        return RunResult(tier="sim", policy=policy_name, scenario_id=scenario.scenario_id(),
                         faults=[Fault(kind="exception", detail=str(answer.get("error", answer)))])

    def close(self) -> None:
        self.child.close()
