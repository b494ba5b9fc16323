"""Minimize a scenario with the scenario stages, keeping its finding's signature.

``minimize`` runs ``fuzz.reduce.stages.STAGES`` through the shrinker; ``same_signature`` is the
predicate every caller uses ("this scenario still gives signature S under candidate vs reference";
a configuration vLLM rejects does not reproduce anything).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from fuzz.errors import ConfigRejected
from fuzz.model.policies import Policy, resolve_policy
from fuzz.model.result import FailOn
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.oracle.efficiency import headline as efficiency_headline
from fuzz.oracle.efficiency import magnitude
from fuzz.oracle.finding import Finding
from fuzz.oracle.signature import finding_signature, is_efficiency
from fuzz.reduce.shrinker import MinimizeReport, Predicate, run_stages
from fuzz.reduce.stages import STAGES
from fuzz.triage.replay import Replayed, replay

KEEP_MAGNITUDE = 0.5  # an efficiency finding minimises only while it keeps half its relative magnitude


def minimize(scenario: Scenario, reproduces: Predicate, max_seconds: float = 120,
             skip: Collection[str] = ()) -> MinimizeReport:
    """Run the scenario stages (minus those named in ``skip``) to a fixpoint or until ``max_seconds`` have passed."""
    return run_stages(scenario, reproduces, STAGES, max_seconds, skip)


def signature_of(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim",
                 fail_on: FailOn = FailOn.CORRECTNESS) -> str:
    """The signature of what ``fail_on`` counts in ``scenario``'s verdict ("clean" when nothing)."""
    replayed = replay(scenario, candidate, reference, tier)
    return finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)


def same_signature(target: str, candidate: Policy, reference: Policy, tier: str = "sim",
                   fail_on: FailOn = FailOn.CORRECTNESS, min_relative: float = 0.0) -> Predicate:
    """The predicate "the same signature still reproduces"; a config vLLM rejects does not.

    For an efficiency signature the magnitude must not shrink away either: the headline kind's
    largest relative magnitude must stay at least ``min_relative`` (callers pass a share of the
    original's, so a 20% loss of cache hits does not minimise into a 1-token loss of a long prompt).
    """

    def reproduces(scenario: Scenario) -> bool:
        try:
            replayed = replay(scenario, candidate, reference, tier)
        except ConfigRejected:
            return False
        if finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on) != target:
            return False
        head = efficiency_headline(replayed.verdict.efficiency)
        return not is_efficiency(target) or (
            head is not None and magnitude(replayed.verdict.efficiency, head.kind)[1] >= min_relative)

    return reproduces


def reproduction_predicate(target: str, replayed: Replayed, candidate: Policy, reference: Policy,
                           fail_on: FailOn) -> Predicate:
    """``same_signature`` for a finding first seen as ``replayed``: an efficiency finding keeps at
    least ``KEEP_MAGNITUDE`` of its relative magnitude."""
    head = efficiency_headline(replayed.verdict.efficiency)
    floor = KEEP_MAGNITUDE * magnitude(replayed.verdict.efficiency, head.kind)[1] \
        if is_efficiency(target) and head is not None else 0.0
    return same_signature(target, candidate, reference, "sim", fail_on, floor)


def minimize_raw_bundle(raw_bundle: str | Path, sig: str, candidate: str, reference: str, seconds: float,
                        fail_on: str = FailOn.CORRECTNESS) -> Finding | None:
    """Minimize a fuzzer's raw bundle (its ``original.json``) while ``sig`` reproduces, for at most
    ``seconds``; the Finding to store (the best reduction so far when time runs out), or None when the
    input does not give ``sig`` again."""
    original, _ = load_scenario(Path(raw_bundle) / "original.json")
    cand, ref, counted = resolve_policy(candidate), resolve_policy(reference), FailOn(fail_on)
    found = replay(original, cand, ref, "sim")
    if finding_signature(found.verdict, original, found.candidate, counted) != sig:
        return None
    report = minimize(original, reproduction_predicate(sig, found, cand, ref, counted), max_seconds=seconds)
    final = found if report.minimized == original else replay(report.minimized, cand, ref, "sim")
    return Finding(sig, original, report.minimized, final.verdict, cand.spec, ref.spec, final.candidate,
                   stages=report.stage_dicts(), reference_run=final.reference, fail_on=counted)
