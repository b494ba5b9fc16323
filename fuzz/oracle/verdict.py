"""The oracle's vocabulary: finding classes, the ``--fail-on`` choice, and the verdict that holds findings.

A *finding class* is everything gdnfuzz knows about one family of findings, in one object: how it is
judged from a candidate run against a reference run (and the truth), the verdict status and exit
code it gives, how a finding of it is named (its signature and the prefix that tells its signatures
apart), which ``--fail-on`` choice counts it, what the minimiser must keep while it shrinks one, what
its report shows, and how a campaign handles it. Each class is one module of
:mod:`fuzz.oracle.classes` that defines ``FINDING_CLASS``, a :class:`FindingClass`; the modules are
found there at first use (:func:`finding_classes`), so adding a class is adding one module and its
tests. Nothing outside a class module names a class.

Invariants:
- classes are ordered by ``rank``: where a verdict has findings of several classes, the lowest rank
  names it (its status, its headline, its signature, its exit code);
- a signature says its class: each class's signatures start with its ``signature_prefix``, and the
  class whose prefix is empty takes what no other prefix claims (:func:`class_of_signature`);
- a class's ``judge`` is a function of the runs alone, so equal runs (a null run) judge equally.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from fuzz.errors import ExitCode
from fuzz.model.result import RequestOutcome, RunResult, SplitDisagreement, VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.divergence import Divergence

OutputsDiffer = Callable[[RequestOutcome, RequestOutcome], bool]
Keeps = Callable[["Verdict"], bool]  # what a minimisation step must still show, beside the signature
CLASSES_PACKAGE = "fuzz.oracle.classes"
ANY = "any"  # the --fail-on choice that counts every class
SAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_SIGNATURE = 128


def slug(text: str) -> str:
    """``text`` as a signature part: file-name-safe, lower case."""
    return SAFE.sub("-", text).strip("-").lower()


@dataclass(frozen=True)
class JudgeInput:
    """Everything a class judges: one scenario's candidate and reference runs on one tier, the truth run
    where the tier has one, and the tier's way of comparing two requests' outputs."""

    scenario: Scenario
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None
    outputs_differ: OutputsDiffer


class FindingClass(ABC):
    """One family of findings (module docstring). Subclasses set the attributes and the three hooks."""

    name: str  # the --fail-on choice that counts it, and verdict.json's "class"
    rank: int  # lower names a verdict first
    description: str  # what it counts, for --help
    status: VerdictStatus  # a verdict named by this class
    exit_code: ExitCode  # a command that counts a finding of this class
    signature_prefix: str  # "" for the class that takes every unclaimed signature
    verdict_key: str  # where its findings sit in a stored verdict (verdict.json's "verdict")
    needs_canary: bool  # "none found" means something only where a canary is caught in the configuration
    locates: bool  # its findings name the request and step where a run went wrong
    confirm_on_engine: bool  # campaign verifiers re-run its findings on the engine tier
    exact_on_sim: bool  # the sim tier measures it exactly: a fix needs no canary there to be believed

    @abstractmethod
    def judge(self, runs: JudgeInput) -> list[Divergence]:
        """This class's findings in a candidate run against a reference run."""

    @abstractmethod
    def headline(self, findings: list[Divergence]) -> Divergence | None:
        """The finding that names a set of this class's findings (None for none)."""

    @abstractmethod
    def signature(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        """The name of this class's findings in ``verdict``: one name per bug, a directory name."""

    @abstractmethod
    def report_section(self, verdict: Verdict, scenario: Scenario, candidate: RunResult,
                       reference: RunResult | None, names: tuple[str, str]) -> tuple[str, str]:
        """``report.md``'s words for a finding of this class: the one line under its summary, and the
        markdown body (tables) that shows its evidence. ``names``: the candidate's and reference's specs."""

    def symptom(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        """The name of this class's findings in ``verdict`` after what they show, whatever their root cause
        (kept in a bundle as evidence); by default the signature."""
        return self.signature(verdict, scenario, candidate_run)

    def keeps(self, found: Verdict) -> Keeps:
        """What every step of a minimisation of ``found`` must still show besides its signature (by
        default nothing more)."""
        return lambda verdict: True

    def costs(self, findings: list[Divergence]) -> list[str]:
        """What the candidate pays beyond the reference, one line a finding, where this class measures a
        cost (``gdnfuzz replay``'s cost column); by default nothing."""
        return []

    def decided_by_candidate(self, candidate_run: RunResult) -> bool:
        """True when the candidate's run alone proves it has no finding of this class, so a fuzzer may
        skip the reference run. By default never (a comparison needs both runs)."""
        return False


@functools.cache
def finding_classes() -> tuple[FindingClass, ...]:
    """Every registered class (one per module of :mod:`fuzz.oracle.classes`), lowest rank first."""
    package = importlib.import_module(CLASSES_PACKAGE)
    found = [importlib.import_module(f"{CLASSES_PACKAGE}.{m.name}").FINDING_CLASS
             for m in pkgutil.iter_modules(package.__path__)]
    return tuple(sorted(found, key=lambda c: c.rank))


def finding_class(name: str) -> FindingClass:
    """The class called ``name`` (a KeyError for an unknown one)."""
    for cls in finding_classes():
        if cls.name == name:
            return cls
    raise KeyError(name)


def class_of_signature(sig: str) -> FindingClass:
    """The class a signature names: the one with the longest prefix it starts with."""
    return max((c for c in finding_classes() if sig.startswith(c.signature_prefix)),
               key=lambda c: len(c.signature_prefix))


def fail_on_choices() -> list[str]:
    """``--fail-on``'s choices: each class's name, then ``any``."""
    return [c.name for c in finding_classes()] + [ANY]


class FailOn(str):
    """Which classes of finding fail a command (``--fail-on``): one class's name, or ``any``.

    A string (its value is what the user typed), so it travels in environments and JSON unchanged."""

    def __new__(cls, value: str) -> FailOn:
        if value not in fail_on_choices():
            raise ValueError(f"{value!r} is not one of {', '.join(fail_on_choices())}")
        return super().__new__(cls, value)

    def counts(self, cls: FindingClass) -> bool:
        return self in (ANY, cls.name)

    @property
    def classes(self) -> tuple[FindingClass, ...]:
        """The classes this choice counts, lowest rank first."""
        return tuple(c for c in finding_classes() if self.counts(c))


def default_fail_on() -> FailOn:
    """The default ``--fail-on``: the lowest-ranked class (correctness)."""
    return FailOn(finding_classes()[0].name)


@dataclass
class Verdict:
    """What the oracle concluded about a candidate against a reference on one tier.

    Invariant: ``status`` is ``clean`` only if no class found anything on either side, both runs
    completed and (where a class needs one) the canary was caught; a run a tier could not do is
    ``unsupported``, never ``clean``; otherwise the lowest-ranked class with findings gives the status.
    """

    status: VerdictStatus
    found: dict[str, list[Divergence]] = field(default_factory=dict)  # class name -> its findings
    resumed: int = 0  # requests that started from a cache hit in the candidate run
    poisoned: int = 0  # poisoned slots in the candidate run
    notes: list[str] = field(default_factory=list)
    root_cause: SplitDisagreement | None = None  # the first split decision where the policies disagree

    def of(self, cls: FindingClass | str) -> list[Divergence]:
        """This verdict's findings of class ``cls`` (a class or its name)."""
        return self.found.get(cls if isinstance(cls, str) else cls.name, [])

    @property
    def naming_class(self) -> FindingClass | None:
        """The lowest-ranked class with findings here (None: nothing was found)."""
        return next((c for c in finding_classes() if self.of(c)), None)

    @property
    def headline(self) -> Divergence | None:
        """The finding that names this verdict: the naming class's headline."""
        cls = self.naming_class
        return None if cls is None else cls.headline(self.of(cls))

    @property
    def located(self) -> Divergence | None:
        """The headline where its class locates findings (a request and a step where a run went wrong)."""
        cls = self.naming_class
        return self.headline if cls is not None and cls.locates else None

    @property
    def summary(self) -> str:
        """The headline's one-line summary ("" when nothing was found)."""
        headline = self.headline
        return headline.summary if headline else ""

    def findings(self) -> list[Divergence]:
        """Every finding of every class, lowest rank first."""
        return [f for c in finding_classes() for f in self.of(c)]

    def to_dict(self) -> dict[str, Any]:
        headline = self.headline
        data: dict[str, Any] = {"status": self.status, "resumed": self.resumed, "poisoned": self.poisoned,
                                "notes": self.notes, "first": asdict(headline) if headline else None,
                                "root_cause": asdict(self.root_cause) if self.root_cause else None}
        for cls in finding_classes():
            data[cls.verdict_key] = [asdict(f) for f in self.of(cls)]
        return data


def finding_signature(verdict: Verdict, scenario: Scenario, candidate_run: RunResult, fail_on: FailOn) -> str:
    """The signature of what ``fail_on`` counts in this verdict: the lowest-ranked counted class with
    findings names it; "clean" when it counts nothing."""
    cls = next((c for c in fail_on.classes if verdict.of(c)), None)
    return "clean" if cls is None else cls.signature(verdict, scenario, candidate_run)


def reference_is_wrong(sig: str) -> bool:
    """Whether ``sig`` names a finding the reference has too (``both-side-``) or alone
    (``reference-side-``): not one the candidate brought."""
    return sig.startswith(("both-side-", "reference-side-"))


def outcome(sig: str) -> str:
    """The one verdict policy every command applies to a signature (``replay``, ``run``, ``ci``, the pytest
    plugin): ``clean`` (nothing counted), ``known`` (the reference is wrong there too: a bug of the base,
    reported, never failing the candidate; the plugin's expected failure, ``ci``'s skipped case) or
    ``new`` (the candidate's own: it fails)."""
    if sig == "clean":
        return "clean"
    return "known" if reference_is_wrong(sig) else "new"


def exit_code_for(signatures: Iterable[str], worker_crashed: bool = False) -> ExitCode:
    """A command's exit code from the signatures it found: the exit code of the lowest-ranked class among
    the candidate's own (``outcome`` ``new``; a crashed worker counts as the lowest-ranked class), else 0."""
    new = {class_of_signature(s) for s in signatures if outcome(s) == "new"}
    ranked = sorted(new | ({finding_classes()[0]} if worker_crashed else set()), key=lambda c: c.rank)
    return ranked[0].exit_code if ranked else ExitCode.CLEAN
