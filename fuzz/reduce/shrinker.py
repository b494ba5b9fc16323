"""The shrinker: shrink a scenario through named stages while a predicate holds, to a fixpoint or a time limit.
Invariants: a candidate is kept only if valid (``from_dict(to_dict())``; a ScenarioError skips it unrun), strictly
simpler by :func:`~fuzz.reduce.simplicity.simplicity_key`, and the predicate holds, so the loop terminates; the
predicate runs once per distinct scenario (by canonical JSON); a scenario it rejects is returned unchanged."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fuzz.model.scenario import Scenario, ScenarioError, canonical_json
from fuzz.reduce.simplicity import simplicity_key

Predicate = Callable[[Scenario], bool]


# ---------------------------------------------------------------- reports


@dataclass
class StageReport:
    """``tried``: predicate runs (cache misses) of the stage; ``kept``: changes kept."""

    name: str
    tried: int = 0
    kept: int = 0
    seconds: float = 0.0


@dataclass
class MinimizeReport:
    original: Scenario
    minimized: Scenario
    stages: list[StageReport] = field(default_factory=list)
    passes: int = 0
    timed_out: bool = False
    seconds: float = 0.0

    def stage_dicts(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.stages]


# ---------------------------------------------------------------- the shrinker


class _OutOfTime(Exception):
    pass


class Shrinker:
    def __init__(self, scenario: Scenario, reproduces: Predicate, deadline: float):
        self.current = scenario
        self.key = simplicity_key(scenario)
        self.reproduces = reproduces
        self.deadline = deadline
        self.cache: dict[str, bool] = {}
        self.report = StageReport("check-original")

    def test(self, scenario: Scenario) -> bool:
        """The predicate, once per distinct scenario."""
        text = canonical_json(scenario)
        if text not in self.cache:
            self.report.tried += 1
            self.cache[text] = bool(self.reproduces(scenario))
        return self.cache[text]

    def consider(self, candidate: Scenario) -> bool:
        """Keep ``candidate`` if it is valid, strictly simpler, and still reproduces; _OutOfTime past the deadline."""
        if time.monotonic() > self.deadline:
            raise _OutOfTime
        try:
            candidate = Scenario.from_dict(candidate.to_dict())
        except ScenarioError:
            return False
        key = simplicity_key(candidate)
        if key >= self.key or not self.test(candidate):
            return False
        self.current, self.key = candidate, key
        self.report.kept += 1
        return True

    def minimize_int(self, read: Callable[[Scenario], int], write: Callable[[Scenario, int], Scenario],
                     low: int, grid: int) -> None:
        """Lower one number: canonical values first (``low``, multiples of ``grid`` and +-1), then bisection."""
        value = read(self.current)
        blocks = {1, 2, 3, value // grid - 1, value // grid} if value >= grid else set()
        canonical = sorted({low, *(k * grid + d for k in blocks if k > 0 for d in (-1, 0, 1))})
        for c in canonical:
            if low <= c < value and self.consider(write(self.current, c)):
                break
        failing, passing = low - 1, read(self.current)
        while passing - failing > 1:
            mid = (failing + passing) // 2
            if self.consider(write(self.current, mid)):
                passing = mid
            else:
                failing = mid


StageFn = Callable[[Shrinker], None]
Stage = tuple[str, StageFn]


def run_stages(scenario: Scenario, reproduces: Predicate, stages: Sequence[Stage], max_seconds: float,
               skip: Collection[str] = ()) -> MinimizeReport:
    """Run ``stages`` in order (minus those named in ``skip``) to a fixpoint or until ``max_seconds`` have passed."""
    start = time.monotonic()
    sh = Shrinker(Scenario.from_dict(scenario.to_dict()), reproduces, start + max_seconds)
    reports = [sh.report] + [StageReport(name) for name, _ in stages if name not in skip]
    report = MinimizeReport(original=scenario, minimized=scenario, stages=reports)
    if not sh.test(sh.current):
        report.seconds = sh.report.seconds = time.monotonic() - start
        return report
    sh.report.seconds = time.monotonic() - start
    by_name = dict(stages)
    try:
        changed = True
        while changed:
            report.passes += 1
            before = sh.key
            for r in reports[1:]:
                sh.report = r
                begun = time.monotonic()
                try:
                    by_name[r.name](sh)
                finally:
                    r.seconds += time.monotonic() - begun
            changed = sh.key < before
    except _OutOfTime:
        report.timed_out = True
    report.minimized = sh.current
    report.seconds = time.monotonic() - start
    return report

