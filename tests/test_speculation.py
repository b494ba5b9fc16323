"""Speculative runs of a sandboxed split (``fuzz.sandbox.speculation``) give exactly the synchronous run's result:
the same steps, outputs, slots, faults and first disagreement, for a one-line mutant of vLLM's split and for splits
whose answers depend on every call their child has seen (``tests/speculation_policies.py``)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.sandbox.speculation import Speculation, synchronous
from fuzz.search.generate import random_scenario
from fuzz.search.profiles import PROFILES

HERE = Path(__file__).parent
POLICIES = HERE / "speculation_policies.py"


def _scenarios(count: int) -> list:
    """Decode-heavy scenarios (long outputs, preemption after decode) and prefill ones, each with many calls."""
    rng = random.Random(17)
    return [random_scenario(rng, PROFILES["batch" if i % 2 else "prefill"]) for i in range(count)]


def _both(sim, scenario, candidate, reference) -> tuple[dict, dict]:
    speculative = sim.run(scenario, candidate, reference).to_dict()
    with synchronous():
        return speculative, sim.run(scenario, candidate, reference).to_dict()


@pytest.mark.parametrize("spec", ["bench/mutants/one_line.py:never_defer",
                                  f"{POLICIES}:counting", f"{POLICIES}:asking"])
def test_a_speculative_run_is_the_synchronous_run(sim, spec):
    candidate, reference = resolve_policy(spec), resolve_policy("vllm")
    departed = 0
    for scenario in _scenarios(10):
        speculative, synchronous_run = _both(sim, scenario, candidate, reference)
        assert speculative == synchronous_run, scenario.to_dict()
        departed += speculative["disagreement"] is not None
    assert departed  # the replay after a departure was exercised, not only runs that agreed throughout


@pytest.mark.parametrize("name,kind", [("exiting", "process-exit"), ("raising", "contract"), ("hanging", "hang")])
def test_a_child_that_ends_raises_or_hangs_mid_run_is_the_same_fault_at_the_same_step(sim, monkeypatch, name, kind):
    monkeypatch.setenv("GDNFUZZ_DEADLINE_S", "2")
    candidate, reference = resolve_policy(f"{POLICIES}:{name}"), resolve_policy("vllm")
    scenario = next(s for s in _scenarios(6) if s.requests and max(r.max_tokens for r in s.requests) > 40)
    speculative, synchronous_run = _both(sim, scenario, candidate, reference)
    assert speculative == synchronous_run
    assert [f["kind"] for f in speculative["faults"]] == [kind]


def test_a_call_the_reference_gives_nothing_to_expect_is_exchanged_after_the_calls_before_it_settle(sim):
    candidate, reference = resolve_policy(f"{POLICIES}:counting"), resolve_policy("vllm")
    scenario = _scenarios(2)[1]
    calls = []

    def silent_at_the_fifth(*args):  # a reference that raises at one call: nothing to expect there
        calls.append(args)
        if len(calls) == 5:
            raise ValueError("no answer")
        return reference.split(*args)

    speculation = Speculation(candidate.split, silent_at_the_fifth)
    speculative = speculation.result(lambda split, probed: sim.run(
        scenario, replace(candidate, split=split), reference if probed else None)).to_dict()
    assert speculation.departure is not None and speculation.departure.unsent and speculation.departure.call == 4
    with synchronous():
        assert speculative == sim.run(scenario, candidate, reference).to_dict()
