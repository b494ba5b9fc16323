"""Structure-aware mutation: every output is a valid scenario; raw bytes still decode."""

from __future__ import annotations

import random

from fuzz.model.scenario import Scenario
from fuzz.search.generate import random_scenario
from fuzz.search.mutate import MUTATIONS, crossover, decode, encode, mutate_scenario


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
