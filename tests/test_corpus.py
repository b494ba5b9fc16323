"""Every corpus entry's expectations hold: one test per entry and candidate policy.

CI fails the day a change makes a known bug undetectable, or makes the
reference diverge on a known-good input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
ENTRIES = sorted(CORPUS.glob("**/*.json"))
CASES = [
    (path, candidate, expected)
    for path in ENTRIES
    for candidate, expected in sorted((load_scenario(path)[1].get("expect") or {}).items())
]


def test_corpus_has_the_pr51113_cases():
    names = {p.stem for p in ENTRIES}
    assert "pr51113-fragmented-first-chunk" in names and "pr51113-fragmented-tail-chunk" in names
    assert all(expected for _, _, expected in CASES)


@pytest.mark.parametrize(("path", "candidate", "expected"), CASES,
                         ids=[f"{p.stem}:{c}" for p, c, _ in CASES])
def test_expectation(path, candidate, expected):
    scenario, _ = load_scenario(path)
    verdict = replay(scenario, resolve_policy(candidate), resolve_policy("vllm")).verdict
    assert verdict.status == expected, verdict.summary
