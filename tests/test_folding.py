"""One bug, one name: root-cause names carry no path, a new name folds into a known bug whose fix removes
it, and a repeat is recognised from the candidate's run alone (``fuzz.search.folding``,
``fuzz.search.repeats``). The folding runs on vLLM's real scheduler (the sim tier)."""

from __future__ import annotations

from pathlib import Path

from fuzz.model.policies import resolve_policy
from fuzz.model.result import SplitDisagreement
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.signature import root_cause_name
from fuzz.oracle.verdict import FailOn, finding_class, finding_signature
from fuzz.search.folding import KnownBugs
from fuzz.search.repeats import REJUDGE, Repeats

ROOT = Path(__file__).resolve().parent.parent
SEED_REGRESSION = ROOT / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"
CORRECTNESS = finding_class("correctness")


def _disagreement(**fields) -> SplitDisagreement:
    base = dict(step=3, request_id="r1", start=100, offered=900, candidate=900, reference=156,
                departure="ran-past", decider="lcp", region="past-lcp", conditions=(), candidate_end="budget")
    return SplitDisagreement(**{**base, **fields})


def test_a_slip_has_one_name_whichever_stop_of_vllm_it_crosses():
    """The same answer of the candidate's, met at vLLM's lcp stop, a junction or a prompt checkpoint."""
    names = {root_cause_name(_disagreement(decider=decider, region=region))
             for decider, region in [("lcp", "past-lcp"), ("junction", ""), ("prompt-checkpoint", ""),
                                     ("next-boundary", "replay")]}
    assert names == {"split-runs-past-to-budget"}


def test_the_name_says_what_the_candidate_did():
    assert root_cause_name(_disagreement(candidate=400, candidate_end="aligned-end")) == (
        "split-runs-past-to-aligned-end")
    assert root_cause_name(_disagreement(candidate=90, reference=156, departure="stopped-short",
                                         candidate_end="sub-block")) == "split-stops-short-at-sub-block"
    assert root_cause_name(_disagreement(candidate=0, departure="deferred", candidate_end="defer")) == (
        "split-defers")
    assert root_cause_name(_disagreement(conditions=("eagle-drop",))) == "split-eagle-drop-runs-past"


def _seed_finding():
    scenario, _ = load_scenario(SEED_REGRESSION)
    candidate, reference = resolve_policy("pre-51113"), resolve_policy("vllm")
    replayed = replay(scenario, candidate, reference)
    signature = finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("correctness"))
    assert replayed.verdict.root_cause is not None
    return scenario, candidate, reference, replayed, signature


def test_a_new_name_folds_into_a_known_bug_whose_fix_removes_it(tmp_path):
    """A known bug that stands for every decision where the candidate departs (a name with no input of
    its own): the candidate answering as the reference there is the reference, so the seed bug folds."""
    scenario, candidate, reference, replayed, signature = _seed_finding()
    known = KnownBugs(tmp_path)
    known.add("split-runs-past-to-aligned-end", _disagreement(candidate_end="aligned-end"), CORRECTNESS)
    assert signature != "split-runs-past-to-aligned-end"
    assert known.fold(signature, scenario, replayed, candidate, reference) == "split-runs-past-to-aligned-end"


def test_a_known_bug_whose_fix_leaves_the_finding_does_not_take_it(tmp_path):
    """A known bug of preempted requests only: fixing it leaves this input's finding (no request is
    preempted here), so the finding keeps a name of its own and is known from then on."""
    scenario, candidate, reference, replayed, signature = _seed_finding()
    known = KnownBugs(tmp_path)
    known.add("split-preempted-runs-past", _disagreement(conditions=("preempted",)), CORRECTNESS)
    assert known.fold(signature, scenario, replayed, candidate, reference) is None
    assert signature in known.bugs


def test_a_cost_never_takes_a_correctness_finding(tmp_path):
    """Folding only goes into a class as severe or more: a correctness finding is never an efficiency name."""
    scenario, candidate, reference, replayed, signature = _seed_finding()
    known = KnownBugs(tmp_path)
    known.add("efficiency-split-runs-past-to-aligned-end", _disagreement(candidate_end="aligned-end"),
              finding_class("efficiency"))
    assert known.fold(signature, scenario, replayed, candidate, reference) is None


def test_a_key_stands_for_a_name_only_after_a_full_judgement_and_never_when_two_disagree():
    repeats = Repeats()
    key = ("split-runs-past-to-budget", "poison-unaligned-end-past-lcp-eagle-family")
    assert repeats.known(key) is None
    repeats.learn(key, "split-eagle-drop-runs-past")
    answers = [repeats.known(key) for _ in range(REJUDGE)]
    assert answers.count(None) == 1 and set(answers) == {None, "split-eagle-drop-runs-past"}
    repeats.learn(key, "split-runs-past-to-budget")  # a second bug behind the same key
    assert all(repeats.known(key) is None for _ in range(2 * REJUDGE))
    repeats.learn(None, "clean")
    assert repeats.known(None) is None
