"""The tier interface every executor (sim, engine, kernels) offers, and the registry that finds one.
Executor invariants: ``run``/``truth`` are deterministic, keep no state across scenarios, and take and give plain data;
a valid configuration a tier cannot run is an ``unsupported`` result, one vLLM rejects raises ConfigRejected; splits
go through ``contract_checked`` (a CandidateGone is a run fault); ``canary_detected`` is None where states are exact;
a reference only adds the first differing decision (sim). ``fuzz/`` imports ``workers/`` lazily via :data:`REGISTRY`."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from fuzz.errors import InputError
from fuzz.model.deadline import deadline_seconds
from fuzz.model.policies import Policy
from fuzz.model.result import (
    PoisonVerdict,
    RequestOutcome,
    RunResult,
    RunStatus,
    exact_outputs_differ,
)
from fuzz.model.scenario import Scenario
from fuzz.model.vllm_build import compiled_ops_unavailable


@dataclass(frozen=True)
class Tier:
    """One place scenarios run: its executor, whether ``confirm`` decides there, preloads, needs compiled ops."""

    name: str
    executor: str
    description: str
    confirms: bool = False
    preload: tuple[str, ...] = ()
    compiled_vllm: bool = False


REGISTRY = {t.name: t for t in (
    Tier("sim", "workers.sim.executor:SimExecutor", "vLLM's real Scheduler, the model runner mirrored exactly",
         preload=("workers.sim.executor", "vllm.engine.arg_utils", "vllm.v1.core.sched.scheduler",
                  "vllm.v1.kv_cache_interface", "vllm.v1.structured_output", "vllm.v1.worker.mamba_utils",
                  "vllm.model_executor.layers.mamba.checkpoint")),
    Tier("engine", "workers.engine.executor:EngineExecutor", "the real vLLM engine on a tiny hybrid model",
         confirms=True, compiled_vllm=True),
    Tier("kernels", "workers.kernels.executor:KernelExecutor", "the GDN kernels on real tensors, on the sim's schedule"),
)}
TIERS = tuple(REGISTRY)
COMPARED = ("sim", "engine")
SCHEDULER_TIER = "sim"  # the tier that builds vLLM's scheduler itself: exported tests replay its configuration  # ``--tier both``: the fast model and the real engine, compared scenario by scenario
BOTH = "both"
CONFIRMING = tuple(t.name for t in REGISTRY.values() if t.confirms)
# The kernel tier's own fuzz target (``gdnfuzz run --target kernels``): bytes in, conformance checked.
KERNEL_CONFORMANCE_TARGET = "workers.kernels.conformance:kernel_conformance_one_input"


class TierUnavailable(InputError):
    """A tier this installation cannot run (one line: which, and why)."""


class Executor(Protocol):
    """The whole tier protocol (see the module docstring for the invariants)."""

    tier: str

    def run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult: ...

    def truth(self, scenario: Scenario) -> RunResult: ...

    def outputs_differ(self, a: RequestOutcome, b: RequestOutcome) -> bool: ...

    def canary_detected(self, scenario: Scenario) -> bool | None: ...

    def poison_verdict(self, scenario: Scenario, policy: Policy) -> PoisonVerdict: ...

    def configuration(self, scenario: Scenario) -> dict[str, Any]: ...

    def as_run(self, scenario: Scenario) -> Scenario: ...

    def deadline(self) -> float: ...

    def close(self) -> None: ...


class BaseExecutor:
    """Defaults of the protocol for a tier with exact outputs and nothing to release."""

    tier = "base"

    def run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult:
        raise NotImplementedError

    def truth(self, scenario: Scenario) -> RunResult:
        raise NotImplementedError

    def outputs_differ(self, a: RequestOutcome, b: RequestOutcome) -> bool:
        return exact_outputs_differ(a, b)

    def canary_detected(self, scenario: Scenario) -> bool | None:
        return None

    def deadline(self) -> float:
        """Seconds one run may take before it is a ``hang``."""
        return deadline_seconds()

    def poison_verdict(self, scenario: Scenario, policy: Policy) -> PoisonVerdict:
        """One run's slots alone: fault, unsupported, poisoned, clean (canary caught or exact) or inconclusive."""
        result = self.run(scenario, policy)
        if result.faults:
            return PoisonVerdict(result.faults[0].kind, result)
        if result.status != RunStatus.OK:
            return PoisonVerdict("unsupported", result)
        if result.poisoned:
            return PoisonVerdict("poisoned", result)
        canary, caught = self.canary_run(scenario)
        return PoisonVerdict("inconclusive" if caught is False else "clean", result, canary, caught)

    def canary_run(self, scenario: Scenario) -> tuple[RunResult | None, bool | None]:
        """The canary's run (None where the tier keeps none) and whether it was caught."""
        return None, self.canary_detected(scenario)

    def configuration(self, scenario: Scenario) -> dict[str, Any]:
        """What this tier builds for ``scenario``, as plain data, where it builds vLLM's scheduler; else {}."""
        return {}

    def as_run(self, scenario: Scenario) -> Scenario:
        """The scenario as this tier really runs it (a knob it cannot honour replaced by the value it uses)."""
        return scenario

    def close(self) -> None:
        return None


def load(target: str) -> Any:
    """The object a ``module:attr`` registry entry names (its module is imported now)."""
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


def executor_for(tier: str) -> Executor:
    """This process's executor for ``tier``: every tier runs here, whatever the policy."""
    return local_executor(tier)


@functools.cache
def local_executor(tier: str) -> Executor:
    """The executor for ``tier`` in this process, created once and reused; raises InputError or TierUnavailable."""
    if tier not in REGISTRY:
        raise InputError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")
    if REGISTRY[tier].compiled_vllm:
        reason = compiled_ops_unavailable()
        if reason is not None:
            raise TierUnavailable(f"the {tier} tier cannot run here: {reason}")
    return load(REGISTRY[tier].executor)()


def tiers_of(choice: str) -> tuple[str, ...]:
    """The tiers a ``--tier`` choice names: one tier, or ``both`` (:data:`COMPARED`)."""
    return COMPARED if choice == BOTH else (choice,)
