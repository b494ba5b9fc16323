"""No tier contradicts the sim: the committed corpus, vLLM against vLLM, on every tier.

Where both the sim and another tier decide a scenario (clean, diverged or regressed, not
unsupported nor inconclusive), they must agree on whether it has a correctness finding; a tier that
does not model a configuration says ``unsupported`` with its reason instead of guessing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.tiers import TIERS

CORPUS = sorted((Path(__file__).resolve().parent.parent / "corpus" / "regressions").glob("*.json"))
DECIDED = (VerdictStatus.CLEAN, VerdictStatus.DIVERGED, VerdictStatus.REGRESSED)


def agreement(tier: str) -> list[tuple[str, str, str]]:
    """(file, sim status, tier status) for every corpus file, vLLM against itself."""
    vllm = resolve_policy("vllm")
    rows = []
    for path in CORPUS:
        scenario, _ = load_scenario(path)
        rows.append((path.stem, replay(scenario, vllm, vllm, "sim").verdict.status,
                     replay(scenario, vllm, vllm, tier).verdict.status))
    return rows


@pytest.mark.slow  # the whole corpus on real engines and kernels: minutes
@pytest.mark.parametrize("tier", [t for t in TIERS if t != "sim"])
def test_no_tier_contradicts_the_sim_on_the_corpus(tier):
    rows = agreement(tier)
    contradictions = [row for row in rows if row[1] in DECIDED and row[2] in DECIDED
                      and (row[1] == VerdictStatus.DIVERGED) != (row[2] == VerdictStatus.DIVERGED)]
    assert contradictions == []
    assert any(row[2] in DECIDED for row in rows)  # the tier decides something, not everything "unsupported"
