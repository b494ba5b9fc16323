"""The tier interface: what every executor (sim, engine, kernels) offers, and the registry that finds one.

An executor runs scenarios in one place (the sim tier's real Scheduler with a mirrored model
runner, the real engine, the GDN kernels) and reports what it observed as a ``RunResult``. Its
invariants, which the oracle and every caller rely on:

- ``run(scenario, policy)`` and ``truth(scenario)`` are deterministic for a given scenario, keep no
  state between scenarios that changes a result, and take and give plain, serialisable values, so
  Ray can ship an executor's work anywhere.
- A valid configuration this tier cannot run is a ``RunResult`` with ``status`` ``unsupported`` and
  the reason in ``notes``, never an exception; a configuration vLLM itself rejects raises
  :class:`~fuzz.errors.ConfigRejected` (the input is invalid on every tier).
- The policy's split is installed through ``fuzz.model.policies.contract_checked`` on every tier; a
  :class:`~fuzz.model.policies.CandidateGone` raised by a sandboxed split is a fault of the run (its
  ``kind``: ``process-exit`` or ``hang``) at that step, like the deadline's ``hang``.
- ``as_run(scenario)`` is the configuration the tier really runs (the engine ties the attention
  block to B in align mode); comparisons between tiers use it.
- ``canary_detected(scenario)`` says whether this tier catches a deliberately corrupted slot in the
  scenario's configuration: ``True`` / ``False`` on tiers with real numerics, ``None`` where states
  are exact (the sim tier compares token sequences, so a wrong slot cannot look right).
- ``run(scenario, policy, reference)``: given a reference, a tier that can (the sim) asks it too at
  every split call of the run, and records the first decision where the two answer differently on
  the same scheduler state in ``RunResult.disagreement`` (a finding's root cause); the run is still
  exactly the policy's. Other tiers leave it None.

Nothing in ``fuzz/`` below the command line imports ``workers/``: executors are named in :data:`REGISTRY`
by module path and imported on first use, and every command takes its ``--tier`` choices from it.
"""

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
    """One place scenarios run: its executor (``module:attr``), what it is, whether ``gdnfuzz confirm``
    decides there (a tier with real state and a canary), the modules its first run imports (a fork
    server imports them once, so a sandbox child forked from it starts with them), and whether it needs
    vLLM's compiled ops (a tier that does is refused in one line where they cannot load:
    ``fuzz.model.vllm_build``)."""

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
        """Seconds one run may take before it is a ``hang`` (the tier keeps it; a caller waiting on a run
        elsewhere waits this long plus its transfer)."""
        return deadline_seconds()

    def poison_verdict(self, scenario: Scenario, policy: Policy) -> PoisonVerdict:
        """One run's slots judged alone: a fault, unsupported, poisoned, or clean where the canary
        is caught (or states are exact), else inconclusive (see ``PoisonVerdict``)."""
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
        """What this tier builds for ``scenario`` (the model's config, state shapes, pool, step limit), as
        plain data, where it builds vLLM's scheduler itself (the sim); empty elsewhere."""
        return {}

    def as_run(self, scenario: Scenario) -> Scenario:
        """The scenario as this tier actually runs it: a knob the tier cannot honour replaced by the
        value it uses, so another tier can be compared with it on the same configuration."""
        return scenario

    def close(self) -> None:
        return None


def load(target: str) -> Any:
    """The object a ``module:attr`` registry entry names (its module is imported now)."""
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


def executor_for(tier: str) -> Executor:
    """This process's executor for ``tier`` (:func:`local_executor`). Every tier runs here, whatever the
    policy: a sandboxed policy's split answers from its child (``fuzz.sandbox.remote``), and a whole
    branch's scheduler runs in its candidate process (``workers.sim.branch``), both as the tier calls them."""
    return local_executor(tier)


@functools.cache
def local_executor(tier: str) -> Executor:
    """The executor for ``tier`` in this process, created once and reused (the engine tier keeps engines
    warm). Importing it imports what the tier needs (vLLM for sim and engine, torch for kernels)."""
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


def tier_help(choices: tuple[str, ...]) -> str:
    """``--tier``'s help: each choice and what it is."""
    named = {**{t.name: t.description for t in REGISTRY.values()}, BOTH: f"{' and '.join(COMPARED)}, compared"}
    return "; ".join(f"{c}: {named[c]}" for c in choices)
