"""Signatures name the bug, not the configuration it was found in (one bug, one crash directory).

A candidate's own finding is named after its root cause (the split decision whose correction removes
it); its symptom name stays in the bundle as evidence. Inputs under tests/data/signatures/ as the
fuzzer found them (not minimized: minimizing drops exactly the configuration these check), and the
corpus entries of each new branch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.verdict import FailOn, finding_class, finding_signature

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "signatures"
REGRESSIONS = ROOT / "corpus" / "regressions"
SEED_BUG = "poison-unaligned-end-past-lcp-eagle-family"  # the symptom
# pre-51113 differs from the installed split in two ways that poison: it runs past the stops EAGLE's
# block drop moves (PR #51113's gate), and it never defers a chunk that cannot end aligned
SEED_BUG_CAUSES = {"split-eagle-drop-runs-past", "split-runs-past-to-budget"}
IGNORE_EXTERNAL = "bench/mutants/ignore_external_start.py:split"


def _signature(path: Path, candidate: str, reference: str = "vllm") -> str:
    return _names(path, candidate, reference)[0]


def _names(path: Path, candidate: str, reference: str = "vllm") -> tuple[str, str]:
    """The signature and the symptom name of what the correctness class counts."""
    scenario, _ = load_scenario(path)
    replayed = replay(scenario, resolve_policy(candidate), resolve_policy(reference))
    return (finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("correctness")),
            finding_class("correctness").symptom(replayed.verdict, scenario, replayed.candidate))


@pytest.mark.parametrize("path", [DATA / "seed-bug-on-a-connector-request.json",
                                  DATA / "different-bug-on-each-side.json",
                                  REGRESSIONS / "pr51113-concurrent-prefills.json"], ids=lambda p: p.stem)
def test_the_seed_bug_has_one_name_wherever_it_is_found(path):
    """A connector on the request, or a different bug of the reference's own in the same input, does
    not rename the candidate's missed #51113 stop: one symptom, named after one of its two causes."""
    signature, symptom = _names(path, "pre-51113")
    assert symptom == SEED_BUG and signature in SEED_BUG_CAUSES


def test_a_known_vllm_bug_has_one_name_whatever_side_and_symptom_it_shows():
    """A finding the reference shares that a known fix (``docs/upstream/*/bug.json``) removes from the reference's
    run is that bug, named so: both-side with the installed split as candidate, reference-side against pre-51113;
    its symptom stays the bundle's evidence."""
    bug = "vllm-bug-checkpoint-after-midblock-resume"
    assert _names(DATA / "different-bug-on-each-side.json", "vllm") == (
        bug, "both-side-poison-unaligned-end-eagle-family-internal-checkpoint")
    assert _names(REGRESSIONS / "internal-checkpoint-midblock-resume.json", "pre-51113") == (
        bug, "reference-side-poison-unaligned-end-no-spec-internal-checkpoint")
    pool = REGRESSIONS / "connector-pool-accounting-valueerror-no-spec.json"
    assert _signature(pool, "vllm") == "vllm-bug-connector-pool-accounting"


def test_a_shared_finding_no_known_fix_removes_keeps_its_symptom_name():
    """Both sides a split no known fix stands for (a file's, not the installed one): the symptom names it."""
    path = sorted(REGRESSIONS.glob("connector-external-*.json"))[0]
    assert _signature(path, IGNORE_EXTERNAL, IGNORE_EXTERNAL) == "both-side-poison-unaligned-end-below-lcp-no-spec"


def test_a_stop_missed_after_a_connector_load_is_told_apart_by_its_class():
    """The split that ignores external tokens misses a stop even the old gate kept (below-lcp), and is
    named after the input it mishandles; the seed bug on a connector-served request keeps its names."""
    for path in sorted(REGRESSIONS.glob("connector-external-*.json")):
        assert _names(path, IGNORE_EXTERNAL) == ("split-external-start-runs-past",
                                                 "poison-unaligned-end-below-lcp-no-spec"), path
