"""Structure-aware mutation: every output is a valid scenario; raw bytes still decode."""

from __future__ import annotations

import random
from dataclasses import replace

from fuzz.model.scenario import Scenario
from fuzz.search.generate import random_scenario
from fuzz.search.mutate import MUTATIONS, crossover, decode, encode, mutate_scenario, serial_steps


def test_every_mutation_keeps_scenarios_valid():
    rng = random.Random(11)
    for _ in range(60):
        s = random_scenario(rng)
        for name in sorted(MUTATIONS):
            out = MUTATIONS[name](s, rng)
            Scenario.from_dict(out.to_dict()) if out is not s else None
        mutated = mutate_scenario(s, rng)
        assert Scenario.from_dict(mutated.to_dict()) == mutated


def test_raw_bytes_decode_and_round_trip():
    for blob in (b"", b"\x00" * 40, bytes(range(256)), b'{"gdnfuzz_scenario": 1}', b"[1, 2]"):
        s = decode(blob)
        assert decode(encode(s)) == s


def test_crossover_is_valid():
    rng = random.Random(5)
    for i in range(40):
        a, b = encode(random_scenario(rng)), encode(random_scenario(rng))
        child = decode(crossover(a, b, 1 << 16, i))
        assert Scenario.from_dict(child.to_dict()) == child


def test_mutations_beyond_the_step_bound_are_dropped():
    """``max_steps`` bounds every mutation's ``serial_steps``; a scenario nothing can mutate within it stays as it is."""
    rng = random.Random(13)
    kept = 0
    for _ in range(80):
        s = random_scenario(rng)
        bound = serial_steps(s)  # no mutation may cost more than its parent
        mutated = mutate_scenario(s, rng, max_steps=bound)
        assert mutated == s or serial_steps(mutated) <= bound
        kept += mutated != s
        child = decode(crossover(encode(s), encode(random_scenario(rng)), 1 << 16, rng.randrange(1 << 30), bound))
        assert child == s or serial_steps(child) <= bound
    assert kept > 10  # the bound drops the costly mutations, not all of them


def test_serial_steps_counts_chunks_outputs_and_arrivals():
    s = random_scenario(random.Random(3))
    one = replace(s, requests=s.requests[:1])
    r = replace(one.requests[0], prompt=(100,), max_tokens=4, arrival_step=2, continues=None)
    engine = replace(one.engine, max_num_batched_tokens=30, step_budgets=(50, 20), long_prefill_token_threshold=0)
    assert serial_steps(replace(one, engine=engine, requests=(r,), segments={})) == 2 + 5 + 4  # chunks of 20
    engine = replace(engine, long_prefill_token_threshold=7)
    assert serial_steps(replace(one, engine=engine, requests=(r,), segments={})) == 2 + 15 + 4
