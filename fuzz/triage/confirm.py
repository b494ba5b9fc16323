"""Confirm a finding: re-run a bundle on the engine tier (the kernel tier where the engine cannot), record it.

``confirmed``: a real slot's state differs from what its hash claims; ``not confirmed``: no poisoned slot while the
canary is caught; else ``inconclusive``, never a silent pass. Evidence names the tier and input (``verdict.json``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.model.policies import Policy, named_in_data, resolve_policy
from fuzz.model.result import ConfirmState, PoisonVerdict, VerdictStatus
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.oracle.differential import replay
from fuzz.store.bundle import load_verdict, update_verdict
from fuzz.tiers import Executor, executor_for

INPUTS = ("scenario.json", "original.json")  # a bundle's minimized input first, then what the fuzzer found


def confirm_bundle(bundle: Path, tier: str = "engine", executor: Executor | None = None,
                   candidate_spec: str | None = None, reference_spec: str | None = None) -> ConfirmState:
    """Re-run ``bundle`` on ``tier`` (or a warm ``executor``), write the outcome into verdict.json, return the state.
    Policies: those given, else the verdict's if built in (a policy a file names is never loaded)."""
    bundle = Path(bundle)
    verdict = load_verdict(bundle / "verdict.json")
    where = bundle / "verdict.json"
    candidate_spec = candidate_spec or named_in_data(verdict["candidate"], f"{where}: candidate", "--candidate")
    reference_spec = reference_spec or named_in_data(verdict["reference"], f"{where}: reference", "--reference")
    executor = executor or executor_for(tier)
    candidate = resolve_policy(candidate_spec)

    @functools.cache
    def scenario_of(name: str) -> Scenario:  # each input is read once, and only if a tier needs it
        return load_scenario(bundle / name)[0]

    name, outcome = _first_runnable(executor, scenario_of, candidate)
    state = outcome.confirmation()
    evidence: dict[str, Any] = {
        "tier": tier,
        "input": name,
        "engine_verdict": outcome.verdict,
        "poisoned_slots": [p.describe() for p in outcome.result.poisoned],
        "faults": [f"{f.kind}: {f.detail.splitlines()[-1] if f.detail else ''}" for f in outcome.result.faults],
        "canary_caught": outcome.canary_caught,
        "notes": outcome.result.notes,
    }
    if outcome.verdict == "unsupported" and tier == "engine":
        # the minimized scenario may show the kernel tier nothing (or be unsupported there) where the
        # original input shows it a bad resume or a named slot
        reference = resolve_policy(reference_spec)
        for name in INPUTS:
            state, evidence["fallback"] = _confirm_on_kernels(scenario_of(name), candidate, reference, name)
            if state != ConfirmState.INCONCLUSIVE:
                break
    update_verdict(bundle, confirmed=state.value, confirmation=evidence)
    return state


def _first_runnable(executor: Executor, scenario_of: Callable[[str], Scenario],
                    candidate: Policy) -> tuple[str, PoisonVerdict]:
    """The first input the tier can run, and its verdict (the last input's when it runs none)."""
    for name in INPUTS:
        outcome = executor.poison_verdict(scenario_of(name), candidate)
        if outcome.verdict != "unsupported":
            return name, outcome
    return name, outcome


def _confirm_on_kernels(scenario: Scenario, candidate: Policy, reference: Policy,
                        name: str) -> tuple[ConfirmState, dict[str, Any]]:
    replayed = replay(scenario, candidate, reference, "kernels")
    state = {VerdictStatus.DIVERGED: ConfirmState.CONFIRMED, VerdictStatus.CLEAN: ConfirmState.NOT_CONFIRMED}.get(
        replayed.verdict.status, ConfirmState.INCONCLUSIVE)
    return state, {"tier": "kernels", "input": name, "verdict": replayed.verdict.status.value,
                   "kind": replayed.verdict.summary, "notes": replayed.verdict.notes}
