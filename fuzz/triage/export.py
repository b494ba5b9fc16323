"""A scenario file or a crash bundle as the finding ``gdnfuzz export-test`` writes a test for.

A bundle says its candidate, reference and class; a scenario file is judged under the candidate and
reference given, by default the policy its ``expect`` says diverges or regresses there (the canary
``naive`` and ``vllm`` itself last) against ``vllm``. A policy the file names is taken only where it is a
built-in name (``fuzz.model.policies.named_in_data``): any other is code, and a file never runs code;
``--candidate`` / ``--reference`` give it. Either way the scenario is replayed on the sim tier, whose scheduler the test rebuilds.

Invariant: the test is written for what the replay shows now: a scenario with nothing to show under
those policies is refused (exit 2) rather than exported as a test that proves nothing.
"""

from __future__ import annotations

from pathlib import Path

from fuzz.errors import InputError
from fuzz.model.expectations import expected_statuses
from fuzz.model.policies import named_in_data, resolve_policy
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
        verdict = path / "verdict.json"
        candidate = candidate or named_in_data(bundle.verdict["candidate"], f"{verdict}: candidate", "--candidate")
        reference = reference or named_in_data(bundle.verdict["reference"], f"{verdict}: reference", "--reference")
    else:
        scenario, notes = load_scenario(path)
        fail_on = FailOn(ANY)
        expect = expected_statuses(notes.get("expect"))
        shown = sorted((p for p, status in expect.items() if status in SHOWN), key=lambda p: p in CANARIES)
        candidate = candidate or (named_in_data(shown[0], f"{path}: expect", "--candidate") if shown else "vllm")
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
