"""Bisect a finding over a vLLM history (``--first-parent``): the first revision where it reproduces (``fixed``: stops).

Each revision, read from git objects into a temporary checkout, is tried once: ``reproduces``, ``clean`` or ``skipped``
(cannot load, or counts another finding; searched around, as ``git bisect skip``). Invariants: both ends are probed
first and must be as the user says (else InputError); the result is the first changed revision and the one before it,
or every revision it may be when skips leave it open."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.errors import ConfigRejected, InputError
from fuzz.model.revision import RevisionError, first_parent_range, resolve, subject
from fuzz.store.bundle import CrashBundle
from fuzz.triage.candidate import MODES, at_revision
from fuzz.triage.verify import reference_of, trial

Probe = Callable[[int], str]  # index into the history -> "changed" / "unchanged" / "skipped"


@dataclass
class Search:
    """A search's end: ``before`` the last unchanged index (-1: old end), ``first`` the first changed, ``skipped``."""

    before: int
    first: int
    skipped: list[int] = field(default_factory=list)

    def open_between(self) -> list[int]:
        """The indices the first change may be at: ``first`` and the skipped ones just before it."""
        return [i for i in range(self.before + 1, self.first + 1) if i == self.first or i in self.skipped]


def search(n: int, probe: Probe) -> Search:
    """Binary search for the first changed index in ``range(n)``, given index -1 unchanged and ``n - 1`` changed."""
    result = Search(-1, n - 1)
    while True:
        untested = [i for i in range(result.before + 1, result.first) if i not in result.skipped]
        if not untested:
            return result
        middle = (result.before + result.first) // 2
        index = min(untested, key=lambda i: (abs(i - middle), i))
        outcome = probe(index)
        if outcome == "changed":
            result.first = index
        elif outcome == "unchanged":
            result.before = index
        else:
            result.skipped.append(index)


@dataclass
class BisectResult:
    direction: str  # "regression" or "fixed"
    mode: str
    checkout: str
    first: str  # the first revision with the change (reproducing for a regression, not for fixed)
    subject: str
    other_end: str  # the last revision before it, without the change
    candidates: list[str]  # more than ``first`` when skipped revisions leave the answer open
    skipped: list[tuple[str, str]]  # (sha, why)
    loaded: int
    revisions: int
    log: list[str] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        """The bundle field this result goes in (``regression_range`` or ``fixed_in``, ``fuzz.store.bundle``)."""
        if self.direction == "fixed":
            return {"candidate": f"{self.checkout} at {self.first[:12]} ({self.subject})", "revision": self.first,
                    "subject": self.subject, "last_bad": self.other_end}
        return {"first_bad": self.first, "subject": self.subject, "last_good": self.other_end, "mode": self.mode,
                "checkout": self.checkout, "skipped": [s for s, _ in self.skipped], "loaded": self.loaded,
                "revisions": self.revisions, "candidates": self.candidates}


def bisect(bundle: CrashBundle, checkout: Path, good: str, bad: str, fixed: bool = False, mode: str = "split",
           log: Callable[[str], None] = lambda _: None, reference_spec: str | None = None) -> BisectResult:
    """Bisect ``bundle``'s finding over ``checkout`` (``good`` to ``bad``) vs ``reference_spec`` (``reference_of``)."""
    if mode not in MODES:
        raise InputError(f"--mode: expected one of {', '.join(MODES)}, got {mode!r}")
    reference = reference_of(bundle, reference_spec)  # a bad reference is the bundle's fault, not a revision's
    good_sha, bad_sha = resolve(checkout, good), resolve(checkout, bad)
    old, new = (bad_sha, good_sha) if fixed else (good_sha, bad_sha)
    history = first_parent_range(checkout, old, new)
    lines: list[str] = []
    loaded: set[str] = set()
    skipped: list[tuple[str, str]] = []

    def say(line: str) -> None:
        lines.append(line)
        log(line)

    def outcome(sha: str) -> str:
        """``reproduces`` / ``clean`` / ``skipped: why`` for one revision."""
        try:
            with at_revision(checkout, sha, mode) as candidate:
                try:
                    got = trial(bundle, candidate.policy, "sim", reference)
                except ConfigRejected:
                    raise
                except InputError as exc:  # the revision's branch refused to start on the installed vLLM
                    return f"skipped: {candidate.in_words(str(exc))}"
        except RevisionError as exc:  # the revision's split cannot be loaded here
            return f"skipped: {exc}"
        loaded.add(sha)
        if got.signature in (bundle.signature, bundle.symptom):
            return "reproduces"
        return "clean" if not got.hit else f"skipped: it counts another finding, {got.signature}"

    def probe(sha: str) -> str:
        result = outcome(sha)
        say(f"{sha[:12]} {subject(checkout, sha)}: {result}")
        if result.startswith("skipped"):
            skipped.append((sha, result.removeprefix("skipped: ")))
            return "skipped"
        return "changed" if (result == "reproduces") != fixed else "unchanged"

    for sha, flag, expect in ((old, "--bad" if fixed else "--good", "unchanged"),
                              (new, "--good" if fixed else "--bad", "changed")):
        got = probe(sha)
        if got != expect:
            said = (expect == "changed") != fixed  # whether the user says the finding reproduces there
            why = "cannot be loaded" if got == "skipped" else \
                f"the finding {'does not reproduce' if said else 'reproduces'} there"
            raise InputError(f"{flag} {sha[:12]}: expected a revision where the finding "
                             f"{'reproduces' if said else 'does not reproduce'}, but {why}")
    found = search(len(history), lambda i: probe(history[i]))
    first = history[found.first]
    other = history[found.before] if found.before >= 0 else old
    candidates = [history[i] for i in found.open_between()]
    say(f"loaded {len(loaded)} of {len(history) + 1} revisions"
        + (f"; skipped {len(skipped)}: {', '.join(s[:12] for s, _ in skipped)}" if skipped else ""))
    if len(candidates) > 1:
        say(f"only skipped revisions are left: the first {'fixed' if fixed else 'bad'} revision is one of "
            + ", ".join(c[:12] for c in candidates))
    say(f"first {'fixed' if fixed else 'bad'} revision: {first[:12]} {subject(checkout, first)}; "
        f"last {'bad' if fixed else 'good'}: {other[:12]}")
    return BisectResult("fixed" if fixed else "regression", mode, str(checkout), first, subject(checkout, first),
                        other, candidates, skipped, len(loaded), len(history) + 1, lines)
