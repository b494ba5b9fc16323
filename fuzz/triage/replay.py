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

from fuzz.errors import ExitCode
from fuzz.model.cost import run_cost
from fuzz.model.policies import Policy
from fuzz.model.result import FailOn, RunResult, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.efficiency import judge_efficiency
from fuzz.oracle.judge import Verdict, judge
from fuzz.tiers import executor_for


@dataclass
class Replayed:
    verdict: Verdict
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None


def replay(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim",
           candidate_run: RunResult | None = None) -> Replayed:
    """Candidate, reference and truth on one tier, judged for correctness and for efficiency.

    ``candidate_run``: the candidate's run of this scenario on this tier when the caller already has
    it (the fuzzer's fast path), so no input runs twice.

    Tiers with real numerics supply ``outputs_differ`` (a calibrated tolerance
    instead of exact tokens) and ``canary_detected``: there a clean verdict
    stands only if a deliberately corrupted slot is caught in the same
    configuration, else it becomes inconclusive.
    """
    executor = executor_for(tier)
    cand = candidate_run if candidate_run is not None else executor.run(scenario, candidate)
    ref = executor.run(scenario, reference)  # even when equal: a null run must catch nondeterminism
    truth = executor.truth(scenario)
    verdict = judge(cand, ref, truth, executor.outputs_differ)
    if verdict.status == VerdictStatus.CLEAN and executor.canary_detected(scenario) is False:
        verdict.status = VerdictStatus.INCONCLUSIVE
        verdict.notes.append("the canary (a corrupted slot) was not detected in this configuration")
    if verdict.status != VerdictStatus.UNSUPPORTED and not cand.faults and not ref.faults:
        verdict.efficiency = judge_efficiency(run_cost(scenario, cand), run_cost(scenario, ref))
        if verdict.efficiency and verdict.status in (VerdictStatus.CLEAN, VerdictStatus.INCONCLUSIVE):
            if verdict.status == VerdictStatus.INCONCLUSIVE:
                verdict.notes.append("correctness is inconclusive here; the efficiency findings stand on their own")
            verdict.status = VerdictStatus.REGRESSED
    return Replayed(verdict, cand, ref, truth)


def exit_code(verdicts: list[Verdict], fail_on: FailOn) -> ExitCode:
    """What a command that judged ``verdicts`` exits with: 1 for a counted correctness finding, else
    4 for a counted efficiency finding, else 0 (``fail_on`` says which class counts)."""
    if fail_on.correctness and any(v.status == VerdictStatus.DIVERGED for v in verdicts):
        return ExitCode.DIVERGED
    if fail_on.efficiency and any(v.efficiency for v in verdicts):
        return ExitCode.REGRESSED
    return ExitCode.CLEAN


def check_expectation(annotations: dict[str, Any], candidate: Policy, verdict: Verdict) -> bool | None:
    """None when the file states no expectation for this candidate."""
    expected = (annotations.get("expect") or {}).get(candidate.spec)
    if expected is None:
        return None
    return verdict.status == expected
