"""The differential core: run a scenario under a candidate and a reference policy on one tier, and judge; executors
are reused per tier per process (engines stay warm). ``check_expectation``: a corpus file's ``expect`` status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuzz.model.expectations import expected_status
from fuzz.model.policies import Policy, corrected, following
from fuzz.model.result import RunResult, RunStatus, SplitDisagreement, VerdictStatus, exact_outputs_differ
from fuzz.model.scenario import Scenario
from fuzz.oracle.signature import stands_for
from fuzz.oracle.upstream import matching_bug
from fuzz.oracle.verdict import FindingClass, JudgeInput, OutputsDiffer, Verdict, finding_classes, outcome
from fuzz.tiers import SCHEDULER_TIER, Executor, executor_for


@dataclass
class Replayed:
    verdict: Verdict
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None


def replay(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim",
           candidate_run: RunResult | None = None, causes: bool = True,
           reference_run: RunResult | None = None, truth_run: RunResult | None = None) -> Replayed:
    """Candidate, reference and truth on one tier, judged by every class; ``root_cause`` set where the candidate has a
    finding of its own (unless ``causes=False``); ``*_run``: runs already made (the candidate's with ``reference``)."""
    executor = executor_for(tier)
    cand = candidate_run if candidate_run is not None else executor.run(scenario, candidate, reference)
    # the reference runs even when equal to the candidate: a null run must catch nondeterminism
    ref = reference_run if reference_run is not None else executor.run(scenario, reference)
    truth = truth_run if truth_run is not None else executor.truth(scenario)
    verdict = judge(scenario, cand, ref, truth, executor.outputs_differ, lambda: executor.canary_detected(scenario))
    if causes and _candidates_own(verdict):
        verdict.root_cause = root_cause(scenario, candidate, reference, executor, cand, ref, truth)
    if causes and tier == SCHEDULER_TIER and any(f.side in ("both", "reference") for f in verdict.findings()):
        verdict.upstream = known_vllm_bug(scenario, reference, executor, truth)
    return Replayed(verdict, cand, ref, truth)


def _candidates_own(verdict: Verdict) -> bool:
    return any(f.side in ("candidate", "unknown") for f in verdict.findings())


def known_vllm_bug(scenario: Scenario, reference: Policy, executor: Executor, truth: RunResult | None) -> str | None:
    """The known vLLM bug (``fuzz.oracle.upstream``) whose fix leaves the reference's run of ``scenario`` sound."""
    bug = matching_bug(reference, lambda fixed: executor.run(scenario, fixed),
                       lambda run: not judge(scenario, run, run, truth, executor.outputs_differ).findings())
    return None if bug is None else bug.name


def root_cause(scenario: Scenario, candidate: Policy, reference: Policy, executor: Executor, cand: RunResult,
               ref: RunResult, truth: RunResult | None) -> SplitDisagreement | None:
    """The split decision causing the candidate's finding: the j-th disagreement with the reference, j the least m for
    which following it at the first m leaves no finding of the candidate's own (doubling, then bisecting). None where
    the tier records no disagreement, or following the reference everywhere still leaves the finding."""
    if cand.disagreement is None:
        return None
    disagreements = {0: cand.disagreement}

    def fixed(m: int) -> bool:
        """No finding of the candidate's own after following the reference at the first m? Records the next."""
        run = executor.run(scenario, following(candidate, reference, m), reference)
        disagreements[m] = run.disagreement
        verdict = judge(scenario, run, ref, truth, executor.outputs_differ)
        return all(outcome(c.symptom(verdict, scenario, run)) != "new" for c in finding_classes() if verdict.of(c))

    low, high = 0, 1  # the finding stands after following `low` disagreements; is it gone after `high`?
    while not fixed(high):
        if disagreements[high] is None:
            return None  # following the reference everywhere leaves the finding
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fixed(middle) else (middle, high)
    return disagreements[low]


def folds_into(scenario: Scenario, candidate: Policy, reference: Policy, cls: FindingClass,
               causes: list[SplitDisagreement], reference_run: RunResult, truth: RunResult | None,
               tier: str = "sim") -> bool:
    """Whether the candidate's ``cls`` finding is the known bugs' with root causes ``causes``: corrected where their
    signatures stand for (``stands_for``), it has none of its own. One run; the runs given are this scenario's."""
    executor = executor_for(tier)
    regions = [stands_for(c) for c in causes]
    fixed = corrected(candidate, reference, lambda d: any(region(d) for region in regions))
    run = executor.run(scenario, fixed, reference)
    verdict = judge(scenario, run, reference_run, truth, executor.outputs_differ)
    return not verdict.of(cls) or outcome(cls.symptom(verdict, scenario, run)) != "new"


def judge(scenario: Scenario, candidate: RunResult, reference: RunResult, truth: RunResult | None = None,
          outputs_differ: OutputsDiffer = exact_outputs_differ,
          canary_detected: Callable[[], bool | None] = lambda: None) -> Verdict:
    """The verdict on two runs (and the truth) on one tier. Where no class needing a canary found anything and
    ``canary_detected()`` (asked only then) is False, it is ``inconclusive``, unless other classes' findings name it."""
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


def check_expectation(annotations: dict[str, Any], candidate: Policy, verdict: Verdict) -> bool | None:
    """None when the file states no expectation for this candidate (on the installed vLLM)."""
    expected = expected_status(annotations.get("expect"), candidate.spec)
    if expected is None:
        return None
    return verdict.status == expected
