"""Workload profiles (issue 25): the prefill profile draws what the generator always drew; the deep profiles reach
long decodes, preemption after decoding (more than once), resumed re-prefill of prompt plus outputs,
continued conversations and aborts mid-decode, on vLLM's real scheduler, within their step bound."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from fuzz.cli import main
from fuzz.model.policies import resolve_policy
from fuzz.model.result import RunResult
from fuzz.model.scenario import canonical_json, prompt_lengths
from fuzz.search.generate import random_scenario, serial_steps, under_decode_pressure
from fuzz.search.mutate import decode, deep_mutations, encode, mutate_scenario
from fuzz.search.profiles import PROFILES
from fuzz.tiers import executor_for

DEEP = [name for name, profile in PROFILES.items() if profile.deep]
# sha1 of the canonical JSON of the prefill profile's first 300 scenarios from seed 7, as the generator drew
# them before profiles existed: corpus seeds, benchmarks and bisect records depend on a seed's scenario. Since
# issue 35 no step budget exceeds max_num_batched_tokens (vLLM caps every step there): 63 of these 300 draw
# their max_num_batched_tokens up to their largest step budget, with the same random draws as before.
DEFAULT_DRAWS = "fa51524fdd20a6844c52a170818c6189b8719d19"


def test_the_prefill_profile_draws_what_the_generator_always_drew() -> None:
    rng = random.Random(7)
    drawn = "".join(canonical_json(random_scenario(rng)) for _ in range(300))
    assert hashlib.sha1(drawn.encode()).hexdigest() == DEFAULT_DRAWS
    assert deep_mutations(PROFILES["prefill"]) == {}


def resumed_after_decoding(result: RunResult, prompts: dict[str, int]) -> dict[str, int]:
    """How often each request restarted (a chunk starting before what it had computed) after decoding
    past its prompt: a preemption after decode, then the re-prefill of its prompt plus outputs."""
    reached: dict[str, int] = {}
    resumed: dict[str, int] = {}
    for step in result.steps:
        for chunk in step.chunks:
            rid = chunk.request_id
            if chunk.start < reached.get(rid, 0) and reached[rid] > prompts[rid]:
                resumed[rid] = resumed.get(rid, 0) + 1
            reached[rid] = max(reached.get(rid, 0), chunk.start + chunk.num_tokens)
    return resumed


@pytest.mark.parametrize("name", DEEP)
def test_a_deep_profile_reaches_the_states_of_serving(name: str) -> None:
    profile, rng, sim, vllm = PROFILES[name], random.Random(5), executor_for("sim"), resolve_policy("vllm")
    seen = {"long decode": 0, "preempted after decoding": 0, "preempted twice": 0, "continued": 0, "aborted": 0}
    for _ in range(40):
        scenario = random_scenario(rng, profile)
        assert serial_steps(scenario) <= profile.max_steps
        result = sim.run(scenario, vllm)
        assert not result.faults, result.faults
        resumed = resumed_after_decoding(result, prompt_lengths(scenario))
        seen["long decode"] += any(r.max_tokens >= 300 for r in scenario.requests)
        seen["preempted after decoding"] += bool(resumed)
        seen["preempted twice"] += any(n >= 2 for n in resumed.values())
        seen["continued"] += any(r.continues for r in scenario.requests)
        seen["aborted"] += any(r.abort_step is not None for r in scenario.requests)
    assert all(seen.values()), seen


@pytest.mark.parametrize("name", DEEP)
def test_a_deep_profiles_mutations_stay_valid_and_within_its_step_bound(name: str) -> None:
    profile, rng = PROFILES[name], random.Random(9)
    scenario = random_scenario(rng, profile)
    for _ in range(60):  # (mutate() would hand some calls to atheris, which needs a running fuzzer)
        scenario = decode(encode(mutate_scenario(scenario, rng, profile.max_steps, profile)))
        assert serial_steps(scenario) <= profile.max_steps


def test_gen_writes_a_profiles_scenarios(tmp_path, capsys) -> None:
    assert main(["gen", "--seed", "3", "--count", "5", "--profile", "chat", "--out", str(tmp_path)]) == 0
    outputs = [r.get("max_tokens", 4) for f in tmp_path.glob("*.json") for r in json.loads(f.read_text())["requests"]]
    assert len(list(tmp_path.glob("*.json"))) == 5 and max(outputs) > 8


def test_an_unknown_profile_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["gen", "--out", "x", "--profile", "nope"])
    assert stop.value.code == 2 and "--profile" in capsys.readouterr().err


def test_decode_pressure_runs_requests_side_by_side() -> None:
    """A pool under decode pressure is only run out by requests decoding together: pressure put on a
    scenario of several requests that runs them one at a time (max_num_seqs 1) runs several."""
    rng = random.Random(11)
    serial = [s for s in (random_scenario(rng) for _ in range(300)) if s.engine.max_num_seqs == 1]
    several = [s for s in serial if len(s.requests) > 1]
    assert several and all(under_decode_pressure(rng, s).engine.max_num_seqs > 1 for s in several)
    assert all(under_decode_pressure(rng, s).engine.max_num_seqs == 1 for s in serial if len(s.requests) == 1)


@pytest.mark.parametrize("name", DEEP)
def test_a_deep_profile_draws_blocks_its_outputs_cross(name: str) -> None:
    """Under a deep profile the smaller Mamba block of two engine draws is kept: the smallest block is drawn
    about twice as often as under the prefill profile, and the largest still is."""
    blocks = {profile: [random_scenario(random.Random(seed), PROFILES[profile]).engine.mamba_block_size
                        for seed in range(360)] for profile in (name, "prefill")}
    smallest, largest = min(blocks["prefill"]), max(blocks["prefill"])
    assert blocks[name].count(smallest) > 1.5 * blocks["prefill"].count(smallest)
    assert largest in blocks[name]
