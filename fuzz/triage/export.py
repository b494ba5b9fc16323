"""Scenario files and crash bundles as the findings ``gdnfuzz export-test`` writes tests for, replayed on the sim tier.

Invariants: a policy a file names runs only if built in; a scenario showing nothing under the policies is refused
(exit 2; in a suite, left out and named) rather than exported as a test that proves nothing."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

from fuzz.errors import InputError
from fuzz.model.expectations import expected_statuses
from fuzz.model.policies import named_in_data as only_builtin
from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import ANY, FailOn, finding_signature
from fuzz.report.expectation import INSTALLED
from fuzz.report.exported_test import ExportedCase, exported_case, render_suite, render_test
from fuzz.store.bundle import load_bundle
from fuzz.tiers import SCHEDULER_TIER, executor_for

SHOWN = (VerdictStatus.DIVERGED, VerdictStatus.REGRESSED)
CANARIES = ("naive", "vllm")  # a file's bug is another candidate's where it names one; naive diverges anywhere


class NothingToExport(InputError):
    """A scenario whose replay under the given policies shows nothing."""


def finding_of(path: Path, candidate: str | None = None, reference: str | None = None,
               trusted: bool = False) -> tuple[Finding, dict[str, str]]:
    """The finding a bundle or scenario file holds, replayed now on the sim tier, and the file's annotations; a named
    policy runs only if built in, or with ``trusted`` (``--trust-named-policies``; still in its sandbox)."""

    def named_in_data(spec: object, where: str, flag: str) -> str:
        return str(spec) if trusted and isinstance(spec, str) else only_builtin(spec, where, flag)

    if (path / "verdict.json").is_file():
        bundle = load_bundle(path)
        scenario, notes = bundle.scenario, bundle.annotations
        fail_on = FailOn(bundle.verdict.get("class") or ANY)
        verdict = path / "verdict.json"
        candidate = candidate or named_in_data(bundle.verdict["candidate"], f"{verdict}: candidate", "--candidate")
        reference = reference or named_in_data(bundle.verdict["reference"], f"{verdict}: reference", "--reference")
    else:
        scenario, notes = load_scenario(path)
        fail_on = FailOn(ANY)
        expect = expected_statuses(notes.get("expect"))
        shown = sorted((p for p, status in expect.items() if status in SHOWN), key=lambda p: p in CANARIES)
        candidate = candidate or (named_in_data(shown[0], f"{path}: expect", "--candidate") if shown else INSTALLED)
        reference = reference or INSTALLED
    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    replayed = replay(scenario, cand, ref, SCHEDULER_TIER)
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
    if sig == "clean":
        raise NothingToExport(f"{path}: nothing to export: {candidate} against {reference} is "
                              f"{replayed.verdict.status} there (give --candidate and --reference)")
    finding = Finding(sig, scenario, scenario, replayed.verdict, cand.spec, ref.spec, replayed.candidate,
                      reference_run=replayed.reference, fail_on=fail_on)
    return finding, notes


def export_test(path: Path, candidate: str | None = None, reference: str | None = None,
                checks: str = "installed", trusted: bool = False) -> tuple[ExportedCase, str]:
    """The finding at ``path`` as a case, and its self-contained pytest file."""
    finding, notes = finding_of(path, candidate, reference, trusted)
    case = exported_case(finding, notes, finding.signature, checks)
    return case, render_test(case, executor_for(SCHEDULER_TIER).configuration(finding.minimized))


def suite_inputs(paths: Iterable[Path]) -> list[Path]:
    """The scenario files and bundles named (a directory: its ``*.json`` files and bundles), in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir() and not (path / "verdict.json").is_file():
            found += sorted(p for p in path.iterdir() if p.suffix == ".json" or (p / "verdict.json").is_file())
        else:
            found.append(path)
    return found


def export_suite(paths: Iterable[Path], candidate: str | None = None, reference: str | None = None,
                 trusted: bool = False) -> tuple[dict[str, str], list[ExportedCase], list[str]]:
    """``render_suite``'s files, its cases (named after their file; a clash is an error), a line per input left out."""
    paths = list(paths)
    cases, skipped, names = [], [], set()
    for path in suite_inputs(paths):
        name = path.name if path.is_dir() else path.stem
        if name in names:
            raise InputError(f"{path}: a second case named {name!r} (ids must be unique)")
        try:
            finding, notes = finding_of(path, candidate, reference, trusted)
        except NothingToExport as exc:
            skipped.append(str(exc))
            continue
        names.add(name)
        cases.append(exported_case(finding, notes, name, "installed"))
    if not cases:
        raise InputError("nothing to export: " + ("; ".join(skipped) or "no scenario files or bundles given"))
    configuration = executor_for(SCHEDULER_TIER).configuration(cases[0].finding.minimized)
    command = shlex.join(["gdnfuzz", "export-test", "--suite", *map(str, paths)])
    return render_suite(cases, configuration, command), cases, skipped

