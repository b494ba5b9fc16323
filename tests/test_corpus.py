"""Every corpus entry's expectations hold on the installed vLLM: one test per entry and candidate policy.

CI fails the day a change makes a known bug undetectable, or makes the
reference diverge on a known-good input. ``tests/test_version_matrix.py`` runs this file again in every
other vLLM environment set up beside this one (``scripts/setup.sh --vllm VERSION``), so each
version's expectations (``fuzz.model.expectations``) are checked on that version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.model.expectations import expected_statuses
from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay

CORPUS = Path(__file__).resolve().parent.parent / "corpus"
ENTRIES = sorted(CORPUS.glob("**/*.json"))
CASES = [
    (path, candidate, expected)
    for path in ENTRIES
    for candidate, expected in sorted(expected_statuses(load_scenario(path)[1].get("expect")).items())
]


def test_corpus_has_the_pr51113_cases():
    names = {p.stem for p in ENTRIES}
    assert "pr51113-fragmented-first-chunk" in names and "pr51113-fragmented-tail-chunk" in names
    assert all(expected for _, _, expected in CASES)
    assert any(candidate == "pre-51113" and expected == "diverged" for _, candidate, expected in CASES)


@pytest.mark.parametrize(("path", "candidate", "expected"), CASES,
                         ids=[f"{p.stem}:{c}" for p, c, _ in CASES])
def test_expectation(path, candidate, expected):
    scenario, _ = load_scenario(path)
    verdict = replay(scenario, resolve_policy(candidate), resolve_policy("vllm")).verdict
    assert verdict.status == expected, verdict.summary
