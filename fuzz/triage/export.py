"""A scenario file or a crash bundle as the finding ``gdnfuzz export-test`` writes a test for.

A bundle says its candidate, reference and class; a scenario file is judged under the candidate and
reference given, by default the policy its ``expect`` says diverges or regresses there (the canary
``naive`` and ``vllm`` itself last) against ``vllm``. Either way the scenario is replayed on the sim tier, whose scheduler the test rebuilds.

Invariant: the test is written for what the replay shows now: a scenario with nothing to show under
those policies is refused (exit 2) rather than exported as a test that proves nothing.
"""

from __future__ import annotations

from pathlib import Path

from fuzz.errors import InputError
from fuzz.model.expectations import expected_statuses
from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import ANY, FailOn, finding_signature
from fuzz.report.exported_test import render_test
from fuzz.store.bundle import load_bundle
from fuzz.tiers import SCHEDULER_TIER, executor_for

SHOWN = (VerdictStatus.DIVERGED, VerdictStatus.REGRESSED)
CANARIES = ("naive", "vllm")  # a file's bug is another candidate's where it names one; naive diverges anywhere


def finding_of(path: Path, candidate: str | None = None, reference: str | None = None) -> Finding:
    """The finding a bundle or a scenario file holds, replayed now on the sim tier."""
    if (path / "verdict.json").is_file():
        bundle = load_bundle(path)
        scenario, fail_on = bundle.scenario, FailOn(bundle.verdict.get("class") or ANY)
        candidate, reference = candidate or bundle.verdict["candidate"], reference or bundle.verdict["reference"]
    else:
        scenario, notes = load_scenario(path)
        fail_on = FailOn(ANY)
        expect = expected_statuses(notes.get("expect"))
        shown = sorted((p for p, status in expect.items() if status in SHOWN), key=lambda p: p in CANARIES)
        candidate = candidate or (shown[0] if shown else "vllm")
        reference = reference or "vllm"
    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    replayed = replay(scenario, cand, ref, SCHEDULER_TIER)
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
    if sig == "clean":
        raise InputError(f"{path}: nothing to export: {candidate} against {reference} is "
                         f"{replayed.verdict.status} there (give --candidate and --reference)")
    return Finding(sig, scenario, scenario, replayed.verdict, cand.spec, ref.spec, replayed.candidate,
                   reference_run=replayed.reference, fail_on=fail_on)


def export_test(path: Path, candidate: str | None = None, reference: str | None = None) -> tuple[Finding, str]:
    """The finding at ``path`` and its pytest file."""
    finding = finding_of(path, candidate, reference)
    return finding, render_test(finding, executor_for(SCHEDULER_TIER).configuration(finding.minimized))
