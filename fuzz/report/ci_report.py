"""What one ``gdnfuzz ci`` run found, as the data its reports render (JUnit, SARIF, the markdown summary).

Invariants: a signature is *new* (fails the run) only if outside the baseline with the reference right there; others
are *known*, with the reason (a ``both-side-*``/``reference-side-*`` one: the reference, or base, has the bug); with a
``baseline_error`` one outside the baseline read is *unchecked*. A run stopped by ``error`` judged nothing; an
*incomplete* run (time bound reached, a fuzzing step without input) never passes."""

from __future__ import annotations

from dataclasses import dataclass, field

from fuzz.model.policies import Policy
from fuzz.oracle.verdict import outcome
from fuzz.plural import plural


@dataclass
class Case:
    """One corpus file replayed, or one signature found while fuzzing."""

    name: str
    phase: str  # "replay" or "fuzz"
    signature: str  # "clean" when nothing counted
    status: str  # the verdict status
    summary: str
    seconds: float
    reproduce: list[str] = field(default_factory=list)  # the gdnfuzz replay command
    new: bool = False
    known: str | None = None  # why a finding does not fail the run (``CiReport.known_because``)
    problem: str | None = None  # why it has no verdict (not judged before the time bound), in one line


@dataclass
class CiReport:
    candidate: Policy
    reference: Policy
    cases: list[Case]
    baseline: set[str]
    baseline_source: str
    baseline_error: str | None = None  # a baseline source that could not be read, in one line
    fuzz_asked: float = 0.0  # the fuzzing budget asked for (--fuzz-time; 0: replay only)
    fuzz_seconds: float = 0.0  # fuzzed, from the first verdict (start-up done) to the stop
    fuzz_execs: int = 0
    fuzz_startup: str = ""  # where the fuzzing step's start-up went, in words
    fuzz_profiles: dict[str, dict[str, float]] = field(default_factory=dict)  # the mixture's figures per profile
    worker_crashes: int = 0
    base: str | None = None  # the code-change form's base revision, in words (the reference is its code)
    error: str | None = None  # what stopped the run before anything was judged (exit 5), in one line
    time_bound: str | None = None  # what the overall time bound cut short, in one line

    @property
    def fuzz_problem(self) -> str | None:
        """Why the fuzzing step asked for judged nothing (it ran no input), or None."""
        if not self.fuzz_asked or self.fuzz_execs or self.error is not None:
            return None
        return "ran no input" + (f" (start-up: {self.fuzz_startup})" if self.fuzz_startup else "")

    def fuzz_figures(self) -> str:
        """The fuzzing step in one line: its time from the first verdict, inputs, signatures, worker crashes."""
        if not self.fuzz_asked:
            return "fuzzing: not asked for (--fuzz-time 0)"
        return (f"fuzzing: {self.fuzz_seconds:.0f}s of the {self.fuzz_asked:g}s asked, counted from the first verdict; "
                f"{plural(self.fuzz_execs, 'input')}, {plural(sum(c.phase == 'fuzz' for c in self.cases), 'signature')}, "
                f"{plural(self.worker_crashes, 'worker crash', 'worker crashes')}"
                + (f"; start-up: {self.fuzz_startup}" if self.fuzz_startup else "")
                + ("; inputs per profile: " + ", ".join(f"{name} {int(f['execs'])} ({f['seconds']:.0f}s)"
                                                        for name, f in self.fuzz_profiles.items())
                   if self.fuzz_profiles else ""))

    @property
    def problems(self) -> list[str]:
        """What was asked and not judged, one line each: the time bound, a fuzzing step without input."""
        fuzz = self.fuzz_problem
        return [p for p in (self.time_bound, fuzz and f"the fuzzing step {fuzz}") if p]

    @property
    def signatures(self) -> dict[str, list[Case]]:
        found: dict[str, list[Case]] = {}
        for case in self.cases:
            if case.signature != "clean" and case.problem is None:
                found.setdefault(case.signature, []).append(case)
        return found

    def is_known(self, sig: str) -> bool:
        """In the baseline, or wrong on the reference (the candidate did not bring it)."""
        return self.known_because(sig) is not None

    def known_because(self, sig: str) -> str | None:
        if sig in self.baseline:
            return f"in the baseline, {self.baseline_source}"
        if outcome(sig) == "known":
            return f"it reproduces on the base {self.base}" if self.base else f"{self.reference.spec} is wrong there too"
        return None

    @property
    def new_signatures(self) -> list[str]:
        return sorted(s for s in self.signatures if not self.is_known(s))

    @property
    def unchecked(self) -> bool:
        """Whether the signatures outside the baseline read may be in the part that could not be read."""
        return self.baseline_error is not None and bool(self.new_signatures)

    @property
    def known_signatures(self) -> list[str]:
        return sorted(s for s in self.signatures if self.is_known(s))


def mark_new(report: CiReport) -> CiReport:
    for case in report.cases:
        judged = case.signature != "clean" and case.problem is None
        case.known = report.known_because(case.signature) if judged else None
        case.new = judged and case.known is None
    return report
