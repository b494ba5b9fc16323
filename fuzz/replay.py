"""Replay scenarios on a tier under a candidate and a reference policy, and judge them.

``replay(scenario, candidate, reference, tier)`` runs the candidate, the
reference and the truth on one executor and returns the Verdict. Executors are
created once per tier per process (``executor_for``) and reused, since the
engine tier keeps engines warm.

Corpus expectations: a corpus file's ``expect`` annotation maps a candidate
policy name to the verdict status it must get against ``vllm`` on the sim tier
(``{"pre-51113": "diverged", "vllm": "clean"}``). ``check_expectation`` says
whether a verdict meets it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

from fuzz.oracle import CLEAN, INCONCLUSIVE, Verdict, judge
from fuzz.policies import Policy
from fuzz.result import RunResult
from fuzz.scenario import Scenario

TIERS = ("sim", "engine", "kernels")


class Executor(Protocol):
    tier: str

    def run(self, scenario: Scenario, policy: Policy) -> RunResult: ...

    def truth(self, scenario: Scenario) -> RunResult: ...


@functools.cache
def executor_for(tier: str) -> Executor:
    if tier == "sim":
        from workers.sim import SimExecutor

        return SimExecutor()
    if tier == "engine":
        from workers.engine import EngineExecutor

        return EngineExecutor()
    if tier == "kernels":
        from workers.kernels import KernelExecutor

        return KernelExecutor()
    raise ValueError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}")


@dataclass
class Replayed:
    verdict: Verdict
    candidate: RunResult
    reference: RunResult
    truth: RunResult | None


def replay(scenario: Scenario, candidate: Policy, reference: Policy, tier: str = "sim") -> Replayed:
    """Candidate, reference and truth on one tier, judged.

    Tiers with real numerics supply ``outputs_differ`` (a calibrated tolerance
    instead of exact tokens) and ``canary_detected``: there a clean verdict
    stands only if a deliberately corrupted slot is caught in the same
    configuration, else it becomes inconclusive.
    """
    executor = executor_for(tier)
    cand = executor.run(scenario, candidate)
    ref = executor.run(scenario, reference)  # even when equal: a null run must catch nondeterminism
    truth = executor.truth(scenario)
    verdict = judge(cand, ref, truth, getattr(executor, "outputs_differ", None))
    canary = getattr(executor, "canary_detected", None)
    if verdict.status == CLEAN and canary is not None and not canary(scenario):
        verdict.status = INCONCLUSIVE
        verdict.notes.append("the canary (a corrupted slot) was not detected in this configuration")
    return Replayed(verdict, cand, ref, truth)


def check_expectation(annotations: dict[str, Any], candidate: Policy, verdict: Verdict) -> bool | None:
    """None when the file states no expectation for this candidate."""
    expected = (annotations.get("expect") or {}).get(candidate.spec)
    if expected is None:
        return None
    return verdict.status == expected
