"""The efficiency class: what the candidate makes the user pay beyond the reference, every slot exact, judged only
where both runs are sound. Named ``efficiency-`` and the root cause, else ``efficiency-<kind>-<spec family>``; a
minimisation keeps ``KEEP_MAGNITUDE`` of the headline's magnitude; exact on the sim tier (verifiers skip the engine)."""

from __future__ import annotations

from fuzz.errors import ExitCode
from fuzz.model.cost import run_cost
from fuzz.model.result import RunResult, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.efficiency import headline, judge_efficiency, magnitude
from fuzz.oracle.evidence import cost_table, side_by_side
from fuzz.oracle.judge import run_is_sound
from fuzz.oracle.signature import conditions, root_cause_name
from fuzz.oracle.verdict import MAX_SIGNATURE, FindingClass, JudgeInput, Keeps, Verdict, slug

KEEP_MAGNITUDE = 0.5  # an efficiency finding minimises only while it keeps half its relative magnitude


class Efficiency(FindingClass):
    name = "efficiency"
    rank = 1
    description = "more recomputed tokens, forward passes or steps to first token, and less of none; exit 4"
    status = VerdictStatus.REGRESSED
    exit_code = ExitCode.REGRESSED
    signature_prefix = "efficiency-"
    verdict_key = "efficiency"
    needs_canary = False
    locates = False
    confirm_on_engine = False
    exact_on_sim = True

    def judge(self, runs: JudgeInput) -> list[Divergence]:
        if not (run_is_sound(runs.candidate) and run_is_sound(runs.reference)):
            return []  # a cost compared with a run that computed something wrong means nothing
        return judge_efficiency(run_cost(runs.scenario, runs.candidate), run_cost(runs.scenario, runs.reference))

    def headline(self, findings: list[Divergence]) -> Divergence | None:
        return headline(findings)

    def signature(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        """``efficiency-`` and the root cause where the splits disagree, else the symptom."""
        if verdict.root_cause is not None and verdict.of(self):
            return (self.signature_prefix + root_cause_name(verdict.root_cause))[:MAX_SIGNATURE]
        return self.symptom(verdict, scenario, candidate_run)

    def symptom(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        head = self.headline(verdict.of(self))
        if head is None:
            return "clean"
        return slug("-".join([self.signature_prefix + head.kind, conditions(scenario, head.kind)[0]]))[:MAX_SIGNATURE]

    def keeps(self, found: Verdict) -> Keeps:
        head = self.headline(found.of(self))
        floor = 0.0 if head is None else KEEP_MAGNITUDE * magnitude(found.of(self), head.kind)[1]

        def still_costly(verdict: Verdict) -> bool:
            now = self.headline(verdict.of(self))
            return now is not None and magnitude(verdict.of(self), now.kind)[1] >= floor

        return still_costly

    def costs(self, findings: list[Divergence]) -> list[str]:
        return [f"{f.kind}: {f.details['amount']} {f.details['unit']}" for f in findings]

    def report_section(self, verdict: Verdict, scenario: Scenario, candidate: RunResult,
                       reference: RunResult | None, names: tuple[str, str]) -> tuple[str, str]:
        assert reference is not None
        requests = sorted({x.request_id for x in verdict.of(self) if x.request_id} or set(candidate.requests))
        tables = "\n\n".join(f"### `{rid}`\n{side_by_side(candidate, reference, rid, names)}" for rid in requests)
        body = f"""## What it costs
{cost_table(scenario, candidate, reference, names)}

## Chunks, `{names[0]}` beside `{names[1]}`
{tables}
"""
        return "An efficiency regression: every slot is exact, the candidate costs the user more.", body


FINDING_CLASS = Efficiency()
