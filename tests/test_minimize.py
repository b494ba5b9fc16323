"""The minimizer keeps its predicate, only ever gets simpler, and shrinks the PR #51113 seeds to the requests
their root cause needs."""

from __future__ import annotations

import pytest
from conftest import CORPUS

from fuzz.model.knobs import EngineKnobs
from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import Request, Scenario, canonical_json, load_scenario, prompt_lengths
from fuzz.reduce.minimize import minimize, same_signature, signature_of
from fuzz.reduce.simplicity import simplicity_key

# The seeds and the requests their root cause needs: the missed stop of the fragmented first chunk needs one
# request; pre-51113's missing deferral needs two requests sharing a step budget (vLLM defers where the whole
# step's budget could hold a block: folding one request's tokens off a budget changes that decision).
SEEDS = {"pr51113-fragmented-first-chunk": 1, "pr51113-concurrent-prefills": 2}


def _busy_scenario() -> Scenario:
    engine = EngineKnobs(spec_decode="eagle", num_speculative_tokens=3, step_budgets=(364, 2002, 700),
                         max_num_seqs=4, long_prefill_token_threshold=800, retention_interval=None)
    requests = (
        Request("a", ("doc",), arrival_step=3, max_tokens=6, accept=(1, 2)),
        Request("b", ("doc", 300), arrival_step=8, abort_step=20),
        Request("c", (40,), continues="a", external_tokens=32),
    )
    return Scenario(engine=engine, segments={"doc": 2002, "spare": 90}, requests=requests, seed=99)


def test_synthetic_predicate_reaches_its_minimum_and_runs_each_candidate_once():
    seen: list[str] = []

    def reproduces(s: Scenario) -> bool:
        assert Scenario.from_dict(s.to_dict()) == s  # every candidate is a valid scenario
        seen.append(canonical_json(s))
        return s.engine.spec_decode != "off" and max(prompt_lengths(s).values()) >= 1601

    original = _busy_scenario()
    report = minimize(original, reproduces, max_seconds=30)
    m = report.minimized
    assert reproduces(m)
    assert len(m.requests) == 1 and prompt_lengths(m) == {m.requests[0].id: 1601}
    assert (m.engine.spec_decode, m.engine.num_speculative_tokens, m.engine.step_budgets) == ("mtp", 1, ())
    assert m.segments == {} and m.requests[0].max_tokens == 1 and m.requests[0].arrival_step == 0
    assert simplicity_key(m) < simplicity_key(original)
    assert len(seen) - 1 == len(set(seen))  # the final check above is the only repeat
    assert [s.name for s in report.stages][:2] == ["check-original", "drop-requests"]


def test_always_false_predicate_leaves_the_scenario_unchanged():
    calls = []
    original = _busy_scenario()
    report = minimize(original, lambda s: calls.append(s) is not None, max_seconds=30)
    assert report.minimized == original and len(calls) == 1
    assert sum(s.kept for s in report.stages) == 0


def test_time_limit_is_respected_and_keeps_the_invariant():
    original = _busy_scenario()
    report = minimize(original, lambda s: s.engine.spec_decode != "off", max_seconds=0)
    assert report.timed_out and report.minimized == original


def test_simplicity_key_orders_the_documented_preferences():
    base = _busy_scenario()
    fewer_requests = Scenario(base.engine, base.segments, base.requests[:1], base.seed)
    assert simplicity_key(fewer_requests) < simplicity_key(base)
    spec_off = base.with_engine(spec_decode="off", num_speculative_tokens=0)
    assert simplicity_key(spec_off) < simplicity_key(base)
    assert simplicity_key(base.with_engine(step_budgets=())) < simplicity_key(base)
    assert simplicity_key(base.with_engine(max_num_seqs=16)) < simplicity_key(base)


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_case_minimizes_to_the_requests_its_cause_needs_with_its_signature(name):
    scenario, _ = load_scenario(CORPUS / "regressions" / f"{name}.json")
    candidate, reference = resolve_policy("pre-51113"), resolve_policy("vllm")
    target = signature_of(scenario, candidate, reference)
    assert target.startswith("split-")  # named after the split decision that causes it
    report = minimize(scenario, same_signature(target, candidate, reference), max_seconds=60)
    m = report.minimized
    assert len(m.requests) == SEEDS[name]
    assert signature_of(m, candidate, reference) == target
    assert simplicity_key(m) <= simplicity_key(scenario)
    assert sum(prompt_lengths(m).values()) <= 2002
