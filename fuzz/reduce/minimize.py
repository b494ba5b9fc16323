"""Minimize a scenario with the scenario stages, keeping its finding's signature.

``minimize`` runs ``fuzz.reduce.stages.STAGES`` through the shrinker; ``same_signature`` is the
predicate every caller uses ("this scenario still gives signature S under candidate vs reference";
a configuration vLLM rejects does not reproduce anything).
"""

from __future__ import annotations

from collections.abc import Collection

from fuzz.errors import ConfigRejected
from fuzz.model.policies import Policy
from fuzz.model.scenario import Scenario
from fuzz.oracle.signature import signature
from fuzz.reduce.shrinker import MinimizeReport, Predicate, run_stages
from fuzz.reduce.stages import STAGES
from fuzz.triage.replay import replay


def minimize(scenario: Scenario, reproduces: Predicate, max_seconds: float = 120,
             skip: Collection[str] = ()) -> MinimizeReport:
    """Run the scenario stages (minus those named in ``skip``) to a fixpoint or until ``max_seconds`` have passed."""
    return run_stages(scenario, reproduces, STAGES, max_seconds, skip)


def signature_of(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim") -> str:
    """The signature of ``scenario``'s finding under candidate vs reference ("clean" when none)."""
    replayed = replay(scenario, candidate, reference, tier)
    return signature(replayed.verdict, scenario, replayed.candidate)


def same_signature(target: str, candidate: Policy, reference: Policy, tier: str = "sim") -> Predicate:
    """The predicate "the same signature still reproduces"; a config vLLM rejects does not."""

    def reproduces(scenario: Scenario) -> bool:
        try:
            return signature_of(scenario, candidate, reference, tier) == target
        except ConfigRejected:
            return False

    return reproduces
