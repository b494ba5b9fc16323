"""Replay scenarios on a tier under a candidate and a reference policy, and judge them.

``replay(scenario, candidate, reference, tier)`` runs the candidate, the
reference and the truth on one executor and returns the Verdict. Executors are
created once per tier per process (``fuzz.tiers.executor_for``) and reused, since the
engine tier keeps engines warm.

Corpus expectations: a corpus file's ``expect`` annotation maps a candidate
policy name to the verdict status it must get against ``vllm`` on the sim tier
(``{"pre-51113": "diverged", "vllm": "clean"}``). ``check_expectation`` says
whether a verdict meets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fuzz.model.policies import Policy
from fuzz.model.result import RunResult, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.judge import Verdict, judge
from fuzz.tiers import executor_for


@dataclass
class Replayed:
    verdict: Verdict
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None


def replay(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim") -> Replayed:
    """Candidate, reference and truth on one tier, judged.

    Tiers with real numerics supply ``outputs_differ`` (a calibrated tolerance
    instead of exact tokens) and ``canary_detected``: there a clean verdict
    stands only if a deliberately corrupted slot is caught in the same
    configuration, else it becomes inconclusive.
    """
    executor = executor_for(tier)
    cand = executor.run(scenario, candidate)
    ref = executor.run(scenario, reference)  # even when equal: a null run must catch nondeterminism
    truth = executor.truth(scenario)
    verdict = judge(cand, ref, truth, executor.outputs_differ)
    if verdict.status == VerdictStatus.CLEAN and executor.canary_detected(scenario) is False:
        verdict.status = VerdictStatus.INCONCLUSIVE
        verdict.notes.append("the canary (a corrupted slot) was not detected in this configuration")
    return Replayed(verdict, cand, ref, truth)


def check_expectation(annotations: dict[str, Any], candidate: Policy, verdict: Verdict) -> bool | None:
    """None when the file states no expectation for this candidate."""
    expected = (annotations.get("expect") or {}).get(candidate.spec)
    if expected is None:
        return None
    return verdict.status == expected
