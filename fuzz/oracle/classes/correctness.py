"""The correctness class: a slot that does not hold what its hash claims, a bad resume, outputs that
differ from the truth, a contract, liveness, crash or hang fault.

Judged by ``fuzz.oracle.judge`` on both sides, named by ``fuzz.oracle.signature``: a finding of the
candidate's own after its root cause (the first split decision where the policies disagree), else
after the first finding (its kind, the stop that was missed, the conditions, the side); it gives the ``diverged``
status and exit 1, and is what every command fails on by default. "None found" means something only
where a canary is caught in the same configuration. Its findings are re-run on the engine tier by a
campaign's verifiers. A candidate run that is right on its own (``self_consistent``) cannot be the
wrong side of a correctness verdict, so a fuzzer may skip the reference for it.
"""

from __future__ import annotations

from fuzz.errors import ExitCode
from fuzz.model.result import RunResult, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.evidence import chunk_tables
from fuzz.oracle.judge import first_finding, judge_correctness, self_consistent
from fuzz.oracle.signature import correctness_signature, root_cause_name, wrong_side
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
        """The root cause where the finding is the candidate's own and its split decided it (a split that
        raised or answered out of range is named by that fault), else the symptom."""
        symptom = self.symptom(verdict, scenario, candidate_run)
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
