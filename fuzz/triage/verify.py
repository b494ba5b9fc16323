"""Check every finding against a new build: still reproduces, fixed, flaky, or unverifiable.

A try *hits* when it counts a finding of the bundle's class: ``reproduces`` every try hit, ``flaky`` some (never
``fixed``), ``fixed`` none, every try decided and the canary caught (:func:`canary_check`), else ``unverifiable``.
Invariants: a bundle verified under a key is not run, nor its issue touched, again; one that fails is one line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode, GdnfuzzError, InputError
from fuzz.model.policies import Policy, named_in_data, resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.oracle.differential import replay
from fuzz.oracle.verdict import FailOn, class_of_signature, finding_class, finding_signature
from fuzz.report.github import sync_issue
from fuzz.report.lifecycle import record_issue_action, record_verification
from fuzz.store.bundle import CrashBundle, load_bundle
from fuzz.tiers import executor_for
from fuzz.triage.candidate import Candidate

UNDECIDED = (VerdictStatus.INCONCLUSIVE, VerdictStatus.UNSUPPORTED)
EXACT_STATES = "not needed: the tier's states and costs are exact counts"


@dataclass(frozen=True)
class Trial:
    """One replay of a bundle: the signature of what it counted (``clean`` for nothing) and its verdict."""

    signature: str
    status: VerdictStatus
    notes: tuple[str, ...] = ()

    @property
    def hit(self) -> bool:
        return self.signature != "clean"

    @property
    def undecided(self) -> bool:
        return not self.hit and self.status in UNDECIDED


def counted_class(bundle: CrashBundle) -> FailOn:
    """What a try counts: the class of finding the bundle holds (its signature's where it records none)."""
    return FailOn(bundle.verdict.get("class") or class_of_signature(bundle.signature).name)


def reference_of(bundle: CrashBundle, given: str | None = None) -> Policy:
    """``given``, else the reference the verdict names if built in (a policy a file names is never loaded)."""
    return resolve_policy(given or named_in_data(bundle.verdict["reference"], f"{bundle.path / 'verdict.json'}: "
                                                 "reference", "--reference"))


def trial(bundle: CrashBundle, policy: Policy, tier: str | None = None, reference: Policy | None = None) -> Trial:
    """The minimized scenario once under ``policy`` against ``reference`` (the bundle's by default), judged."""
    scenario = bundle.scenario
    replayed = replay(scenario, policy, reference or reference_of(bundle), tier or bundle.verdict["tier"],
                      causes=False)
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, counted_class(bundle))
    return Trial(sig, replayed.verdict.status, tuple(replayed.verdict.notes))


def classify(tries: int, hits: int, undecided: list[str], canary_caught: bool | None) -> tuple[str, str]:
    """``(status, reason)`` from the counts (module docstring); the reason is empty for a plain result."""
    if hits == tries:
        return "reproduces", ""
    if hits:
        return "flaky", f"reproduced in {hits} of {tries} tries ({hits / tries:.0%})"
    if undecided:
        return "unverifiable", undecided[0]
    if canary_caught is False:
        return "unverifiable", "the canary was not caught in this configuration (a wrong slot would not show)"
    return "fixed", ""


def canary_check(bundle: CrashBundle, tier: str, reference: Policy) -> tuple[bool | None, str]:
    """Whether a wrong slot would show in this configuration: the engine's and kernels' canary; on the sim tier the
    ``naive`` split diverging (correctness), a class exact on sim (``exact_on_sim``) needing none."""
    if tier != "sim":
        caught = executor_for(tier).canary_run(bundle.scenario)[1]
        return caught, EXACT_STATES if caught is None else ("caught" if caught else "missed")
    if finding_class(counted_class(bundle)).exact_on_sim:
        return None, EXACT_STATES
    naive = replay(bundle.scenario, resolve_policy("naive"), reference, "sim")
    if naive.verdict.status == VerdictStatus.DIVERGED:
        return True, "caught: the naive split diverges on this scenario"
    return False, "missed: the naive split does not diverge on this scenario"


def verify_bundle(bundle: CrashBundle, candidate: Candidate, tries: int, tier: str | None = None,
                  reference: str | None = None) -> dict[str, Any]:
    """The verification record (``fuzz.store.bundle``'s format) of ``bundle`` against ``candidate``."""
    tier = tier or bundle.verdict["tier"]
    against = reference_of(bundle, reference)
    trials = [trial(bundle, candidate.policy, tier, against) for _ in range(tries)]
    hits = sum(t.hit for t in trials)
    undecided = [f"try {i + 1}: {t.status}: {'; '.join(t.notes) or 'no notes'}"
                 for i, t in enumerate(trials) if t.undecided]
    caught: bool | None = None
    canary = None
    if not hits and not undecided:
        caught, canary = canary_check(bundle, tier, against)
    status, reason = classify(tries, hits, undecided, caught)
    return {"candidate": candidate.label, "status": status, "tries": tries, "hits": hits, "tier": tier,
            "canary": canary, "signatures": sorted({t.signature for t in trials if t.hit}),
            "notes": [reason] if reason else []}


@dataclass
class Outcome:
    """What ``verify_store`` did for one bundle: record (None: unverified), ``already``, issue action, what failed."""

    bundle: Path
    signature: str
    record: dict[str, Any] | None
    already: bool = False
    issue: dict[str, Any] | None = None
    issue_now: bool = False  # the issue action was taken by this run (else: recorded by an earlier one)
    error: GdnfuzzError | None = None
    issue_error: GdnfuzzError | None = None

    @property
    def failures(self) -> list[GdnfuzzError]:
        return [e for e in (self.error, self.issue_error) if e is not None]


def bundles_in(paths: list[Path], with_issue: bool = False) -> list[Path]:
    """Bundle dirs named or one level below a crash store (``with_issue``: filed ones only); others: InputError."""
    found: list[Path] = []
    for path in paths:
        if (path / "verdict.json").is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.iterdir() if (p / "verdict.json").is_file())
        else:
            raise InputError(f"{path}: not a crash bundle nor a crash store")
    return [p for p in found if not with_issue or (p / "issue.json").is_file()]


def verify_store(bundles: list[Path], candidate: Candidate, tries: int, tier: str | None = None,
                 repo: str | None = None, api_url: str | None = None,
                 log: Callable[[Outcome], None] = lambda _: None, reference: str | None = None) -> list[Outcome]:
    """Verify each bundle, then with ``repo`` sync its issue, each once per ``candidate`` key; failures per bundle."""
    if tries < 1:
        raise InputError(f"--tries: expected at least 1, got {tries}")
    outcomes = []
    for path in bundles:
        outcome = _verify_one(path, candidate, tries, tier, reference)
        if repo is not None and outcome.record is not None and outcome.issue is None:
            try:
                outcome.issue, outcome.issue_now = sync_issue(path, repo, outcome.record, api_url), True
                record_issue_action(path, candidate.key, outcome.issue)
            except GdnfuzzError as exc:  # this bundle's issue only: the next bundle goes on
                outcome.issue, outcome.issue_error = None, exc
        log(outcome)
        outcomes.append(outcome)
    return outcomes


def _verify_one(path: Path, candidate: Candidate, tries: int, tier: str | None, reference: str | None) -> Outcome:
    """One bundle's verification, recorded; one that cannot be read or run is an Outcome with its error."""
    try:
        bundle = load_bundle(path)
        record = (bundle.verdict.get("verifications") or {}).get(candidate.key)
        if record is not None:
            return Outcome(path, bundle.signature, record, True, record.get("issue"))
        record = verify_bundle(bundle, candidate, tries, tier, reference)
        fixed_in = None
        if record["status"] == "fixed":
            fixed_in = {"candidate": candidate.label, "revision": candidate.revision,
                        "subject": candidate.subject, "last_bad": None}
        record_verification(path, candidate.key, record, fixed_in)
        return Outcome(path, bundle.signature, record)
    except GdnfuzzError as exc:  # this bundle only: the next one goes on
        return Outcome(path, path.name, None, error=exc)


def exit_code(outcomes: list[Outcome]) -> ExitCode:
    """1 while a finding reproduces or is flaky; else 5 if the API or storage failed; else a bad bundle's code; 0."""
    if any(o.record is not None and o.record["status"] in ("reproduces", "flaky") for o in outcomes):
        return ExitCode.DIVERGED
    failures = [e for o in outcomes for e in o.failures]
    if any(e.exit_code == ExitCode.INFRASTRUCTURE for e in failures):
        return ExitCode.INFRASTRUCTURE
    return ExitCode(failures[0].exit_code) if failures else ExitCode.CLEAN


def describe(outcome: Outcome) -> str:
    """One line: signature, status with its counts, the reason, the issue action (or what failed)."""
    r = outcome.record
    if r is None:
        return f"{outcome.signature}: not verified: {outcome.error}"
    line = f"{outcome.signature}: {r['status']} ({r['hits']}/{r['tries']} tries"
    line += f", rate {r['hits'] / r['tries']:.2f})" if r["status"] == "flaky" else ")"
    if r["notes"]:
        line += f": {r['notes'][0]}"
    if outcome.already:
        line += " [already verified against this candidate]"
    if outcome.issue is not None:
        issue = outcome.issue
        line += f"; issue {issue['repo']}#{issue['number']}: {issue['action']}"
        line += f" ({issue['reason']})" if issue.get("reason") else ""
        line += "" if outcome.issue_now else " earlier (nothing sent)"
    if outcome.issue_error is not None:
        line += f"; issue not brought in line (tried again next run): {outcome.issue_error}"
    return line
