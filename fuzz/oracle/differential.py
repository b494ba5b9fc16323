"""The differential core: run a scenario under a candidate and a reference policy on one tier, and judge.

``replay(scenario, candidate, reference, tier)`` runs the candidate, the reference and the truth on
one executor and judges them with every finding class (``fuzz.oracle.verdict``). Executors are
created once per tier per process (``fuzz.tiers.executor_for``) and reused, since the engine tier
keeps engines warm.

Corpus expectations: a corpus file's ``expect`` annotation maps a candidate policy name to the
verdict status it must get against ``vllm`` on the sim tier (``{"pre-51113": "diverged", "vllm":
"clean"}``). ``check_expectation`` says whether a verdict meets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuzz.errors import ExitCode
from fuzz.model.policies import Policy
from fuzz.model.result import RunResult, RunStatus, VerdictStatus, exact_outputs_differ
from fuzz.model.scenario import Scenario
from fuzz.oracle.verdict import FailOn, JudgeInput, OutputsDiffer, Verdict, finding_classes
from fuzz.tiers import executor_for


@dataclass
class Replayed:
    verdict: Verdict
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None


def replay(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim",
           candidate_run: RunResult | None = None) -> Replayed:
    """Candidate, reference and truth on one tier, judged by every finding class.

    ``candidate_run``: the candidate's run of this scenario on this tier when the caller already has
    it (the fuzzer's fast path), so no input runs twice.
    """
    executor = executor_for(tier)
    cand = candidate_run if candidate_run is not None else executor.run(scenario, candidate)
    ref = executor.run(scenario, reference)  # even when equal: a null run must catch nondeterminism
    truth = executor.truth(scenario)
    verdict = judge(scenario, cand, ref, truth, executor.outputs_differ, lambda: executor.canary_detected(scenario))
    return Replayed(verdict, cand, ref, truth)


def judge(scenario: Scenario, candidate: RunResult, reference: RunResult, truth: RunResult | None = None,
          outputs_differ: OutputsDiffer = exact_outputs_differ,
          canary_detected: Callable[[], bool | None] = lambda: None) -> Verdict:
    """The verdict on two runs of ``scenario`` (and the truth) on one tier.

    Tiers with real numerics supply ``outputs_differ`` (a calibrated tolerance instead of exact
    tokens, whose default is exact tokens) and ``canary_detected`` (asked only when needed): where no
    class that needs a canary found anything, the verdict is ``inconclusive`` unless a deliberately
    corrupted slot is caught in the same configuration; findings of a class that needs none still
    name the verdict then.
    """
    if RunStatus.UNSUPPORTED in (candidate.status, reference.status):
        return Verdict(VerdictStatus.UNSUPPORTED, notes=candidate.notes + reference.notes)
    runs = JudgeInput(scenario, candidate, reference, truth, outputs_differ)
    classes = finding_classes()
    verdict = Verdict(VerdictStatus.CLEAN, {c.name: c.judge(runs) for c in classes},
                      resumed=sum(1 for o in candidate.requests.values() if o.resumed),
                      poisoned=len(candidate.poisoned), notes=list(candidate.notes))
    canaried = [c for c in classes if c.needs_canary]
    if not any(verdict.of(c) for c in canaried) and canary_detected() is False:
        verdict.status = VerdictStatus.INCONCLUSIVE
        verdict.notes.append("the canary (a corrupted slot) was not detected in this configuration")
    named = verdict.naming_class
    if named is not None:
        if verdict.status == VerdictStatus.INCONCLUSIVE:
            verdict.notes.append(f"{' and '.join(c.name for c in canaried)} is inconclusive here; "
                                 f"the {named.name} findings stand on their own")
        verdict.status = named.status
    return verdict


def exit_code(verdicts: list[Verdict], fail_on: FailOn) -> ExitCode:
    """What a command that judged ``verdicts`` exits with: the exit code of the lowest-ranked class
    ``fail_on`` counts that any verdict has findings of, else 0."""
    for cls in fail_on.classes:
        if any(v.of(cls) for v in verdicts):
            return cls.exit_code
    return ExitCode.CLEAN


def check_expectation(annotations: dict[str, Any], candidate: Policy, verdict: Verdict) -> bool | None:
    """None when the file states no expectation for this candidate."""
    expected = (annotations.get("expect") or {}).get(candidate.spec)
    if expected is None:
        return None
    return verdict.status == expected
