"""The correctness class: wrong slots, bad resumes, outputs off the truth, faults (``fuzz.oracle.judge``, both sides).
Named by a candidate's own root cause, else the symptom; a candidate run right on its own is never the wrong side."""

from __future__ import annotations

from fuzz.errors import ExitCode
from fuzz.model.result import RunResult, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.evidence import chunk_tables
from fuzz.oracle.judge import first_finding, judge_correctness, self_consistent
from fuzz.oracle.signature import correctness_signature, root_cause_name, wrong_side
from fuzz.oracle.upstream import PREFIX as UPSTREAM_PREFIX
from fuzz.oracle.verdict import FindingClass, JudgeInput, Verdict, reference_is_wrong


class Correctness(FindingClass):
    name = "correctness"
    rank = 0
    description = "wrong slots, outputs, faults"
    status = VerdictStatus.DIVERGED
    exit_code = ExitCode.DIVERGED
    signature_prefix = ""
    verdict_key = "findings"
    needs_canary = True
    locates = True
    confirm_on_engine = True
    exact_on_sim = False

    def judge(self, runs: JudgeInput) -> list[Divergence]:
        return judge_correctness(runs)

    def headline(self, findings: list[Divergence]) -> Divergence | None:
        return first_finding(findings)

    def signature(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        """The known vLLM bug a shared finding is; the root cause where the candidate's own finding is its split's
        (contract faults aside); else the symptom."""
        symptom = self.symptom(verdict, scenario, candidate_run)
        if verdict.upstream is not None and reference_is_wrong(symptom):
            return UPSTREAM_PREFIX + verdict.upstream  # one name per known vLLM bug, whatever it showed
        head = self.headline(verdict.of(self))
        if verdict.root_cause is None or reference_is_wrong(symptom) or head is None or head.kind == "contract":
            return symptom
        return root_cause_name(verdict.root_cause)

    def symptom(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        return correctness_signature(verdict.of(self), scenario, candidate_run)

    def report_section(self, verdict: Verdict, scenario: Scenario, candidate: RunResult,
                       reference: RunResult | None, names: tuple[str, str]) -> tuple[str, str]:
        head = self.headline(verdict.of(self))
        assert head is not None
        who = f"`{head.request_id}`" if head.request_id is not None else "none (the step itself failed)"
        at = f", step {head.step}" if head.step is not None else ""
        side = wrong_side(verdict.of(self), scenario, candidate)
        where = f"First divergent request: {who}{at}; the wrong side: {side}."
        return where, chunk_tables(candidate, reference, head.request_id, head.step, names)

    def decided_by_candidate(self, candidate_run: RunResult) -> bool:
        return self_consistent(candidate_run)


FINDING_CLASS = Correctness()
