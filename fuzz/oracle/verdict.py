"""The oracle's vocabulary: finding classes (one module of :mod:`fuzz.oracle.classes` each; nothing else names one),
``--fail-on`` and the verdict. Invariants: the lowest ``rank`` with findings names a verdict; signatures start with
their class's ``signature_prefix`` (the empty one takes the rest); a ``judge`` is a function of the runs alone."""

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
    """One scenario's candidate and reference runs on one tier, the truth where there is one, the output comparison."""

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
        """``report.md``'s line under the summary and markdown evidence body; ``names``: the two specs."""

    def symptom(self, verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
        """The name after what the findings show, whatever their root cause (bundle evidence); default the signature."""
        return self.signature(verdict, scenario, candidate_run)

    def keeps(self, found: Verdict) -> Keeps:
        """What every minimisation step of ``found`` must still show besides its signature (default nothing)."""
        return lambda verdict: True

    def costs(self, findings: list[Divergence]) -> list[str]:
        """The candidate's costs beyond the reference, a line a finding (``replay``'s cost column); default none."""
        return []

    def decided_by_candidate(self, candidate_run: RunResult) -> bool:
        """The candidate's run alone proves no finding of this class (skip the reference); default never."""
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
    return [c.name for c in finding_classes()] + [ANY]


class FailOn(str):
    """Which classes fail a command (``--fail-on``): a class's name or ``any``; a str, as env and JSON carry it."""

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
    """What the oracle concluded on one tier. Invariant: ``clean`` only if nothing was found, both runs completed
    and any needed canary was caught; a run a tier cannot do is ``unsupported``; else the lowest class found sets it."""

    status: VerdictStatus
    found: dict[str, list[Divergence]] = field(default_factory=dict)  # class name -> its findings
    resumed: int = 0  # requests that started from a cache hit in the candidate run
    poisoned: int = 0  # poisoned slots in the candidate run
    notes: list[str] = field(default_factory=list)
    root_cause: SplitDisagreement | None = None  # the first split decision where the policies disagree
    upstream: str | None = None  # the known vLLM bug (``fuzz.oracle.upstream``) the reference's findings are

    def of(self, cls: FindingClass | str) -> list[Divergence]:
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
        headline = self.headline
        return headline.summary if headline else ""

    def findings(self) -> list[Divergence]:
        """Every finding of every class, lowest rank first."""
        return [f for c in finding_classes() for f in self.of(c)]

    def to_dict(self) -> dict[str, Any]:
        headline = self.headline
        data: dict[str, Any] = {"status": self.status, "resumed": self.resumed, "poisoned": self.poisoned,
                                "notes": self.notes, "first": asdict(headline) if headline else None,
                                "root_cause": asdict(self.root_cause) if self.root_cause else None,
                                "upstream": self.upstream}
        for cls in finding_classes():
            data[cls.verdict_key] = [asdict(f) for f in self.of(cls)]
        return data


def finding_signature(verdict: Verdict, scenario: Scenario, candidate_run: RunResult, fail_on: FailOn) -> str:
    """The signature of what ``fail_on`` counts: the lowest-ranked counted class with findings; else "clean"."""
    cls = next((c for c in fail_on.classes if verdict.of(c)), None)
    return "clean" if cls is None else cls.signature(verdict, scenario, candidate_run)


def reference_is_wrong(sig: str) -> bool:
    """Whether ``sig`` names a finding the reference has too (``both-side-``), alone (``reference-side-``), or a
    known bug of vLLM's own (``vllm-bug-``, ``fuzz.oracle.upstream``)."""
    return sig.startswith(("both-side-", "reference-side-", "vllm-bug-"))


def outcome(sig: str) -> str:
    """Every command's verdict policy for a signature: ``clean``, ``known`` (the reference is wrong too: reported, never
    failing the candidate) or ``new`` (the candidate's own: it fails)."""
    if sig == "clean":
        return "clean"
    return "known" if reference_is_wrong(sig) else "new"


def exit_code_for(signatures: Iterable[str], worker_crashed: bool = False) -> ExitCode:
    """A command's exit code from the signatures it found: the exit code of the lowest-ranked class among
    the candidate's own (``outcome`` ``new``; a crashed worker counts as the lowest-ranked class), else 0."""
    new = {class_of_signature(s) for s in signatures if outcome(s) == "new"}
    ranked = sorted(new | ({finding_classes()[0]} if worker_crashed else set()), key=lambda c: c.rank)
    return ranked[0].exit_code if ranked else ExitCode.CLEAN
