"""Minimize a scenario with the scenario stages, keeping its finding's signature; ``same_signature`` is every caller's
predicate (the signature and the class's ``keeps`` still hold; a configuration vLLM rejects reproduces nothing)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from fuzz.errors import ConfigRejected
from fuzz.model.policies import Policy, resolve_policy
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.oracle.differential import Replayed, replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import FailOn, Keeps, class_of_signature, default_fail_on, finding_signature
from fuzz.reduce.shrinker import MinimizeReport, Predicate, run_stages
from fuzz.reduce.stages import STAGES


def minimize(scenario: Scenario, reproduces: Predicate, max_seconds: float = 120,
             skip: Collection[str] = ()) -> MinimizeReport:
    """Run the scenario stages (minus those named in ``skip``) to a fixpoint or until ``max_seconds`` have passed."""
    return run_stages(scenario, reproduces, STAGES, max_seconds, skip)


def signature_of(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim",
                 fail_on: FailOn | None = None) -> str:
    """The signature of what ``fail_on`` (default: the default ``--fail-on``) counts in ``scenario``'s verdict."""
    replayed = replay(scenario, candidate, reference, tier)
    return finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on or default_fail_on())


def same_signature(target: str, candidate: Policy, reference: Policy, tier: str = "sim",
                   fail_on: FailOn | None = None, keeps: Keeps | None = None) -> Predicate:
    """The predicate "``target`` still reproduces (and ``keeps`` holds)"; a config vLLM rejects does not."""
    counted = fail_on or default_fail_on()

    def reproduces(scenario: Scenario) -> bool:
        try:
            replayed = replay(scenario, candidate, reference, tier)
        except ConfigRejected:
            return False
        return (finding_signature(replayed.verdict, scenario, replayed.candidate, counted) == target
                and (keeps is None or keeps(replayed.verdict)))

    return reproduces


def reproduction_predicate(target: str, replayed: Replayed, candidate: Policy, reference: Policy,
                           fail_on: FailOn) -> Predicate:
    """``same_signature`` for a finding first seen as ``replayed``, keeping what its class asks kept."""
    return same_signature(target, candidate, reference, "sim", fail_on,
                          class_of_signature(target).keeps(replayed.verdict))


def minimize_raw_bundle(raw_bundle: str | Path, sig: str, candidate: str, reference: str, seconds: float,
                        fail_on: FailOn | None = None) -> Finding | None:
    """Minimize a raw bundle's input while ``sig`` reproduces, for ``seconds`` at most: the Finding (the best so far at
    the limit), or None when the input does not give ``sig`` again."""
    original, _ = load_scenario(Path(raw_bundle) / "original.json")
    cand, ref, counted = resolve_policy(candidate), resolve_policy(reference), fail_on or default_fail_on()
    found = replay(original, cand, ref, "sim")
    if finding_signature(found.verdict, original, found.candidate, counted) != sig:
        return None
    report = minimize(original, reproduction_predicate(sig, found, cand, ref, counted), max_seconds=seconds)
    final = found if report.minimized == original else replay(report.minimized, cand, ref, "sim")
    return Finding(sig, original, report.minimized, final.verdict, cand.spec, ref.spec, final.candidate,
                   stages=report.stage_dicts(), reference_run=final.reference, fail_on=counted,
                   minimize_seconds=seconds, timed_out=report.timed_out)
