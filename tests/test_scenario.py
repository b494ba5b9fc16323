"""The scenario model: canonical form, validation errors that name the field and file."""

from __future__ import annotations

import json

import pytest

from fuzz.model.scenario import Scenario, ScenarioError, canonical_json, load_scenario, own_prompt_tokens

BASE = {
    "gdnfuzz_scenario": 1,
    "engine": {"mamba_block_size": 64, "max_num_batched_tokens": 100},
    "segments": {"sys": 70},
    "requests": [{"id": "a", "prompt": ["sys", 5]}, {"id": "b", "prompt": ["sys"], "continues": "a"}],
}


def test_round_trip_is_canonical():
    s = Scenario.from_dict(BASE)
    again = Scenario.from_dict(json.loads(canonical_json(s)))
    assert again == s
    assert canonical_json(again) == canonical_json(s)
    assert s.scenario_id() == again.scenario_id()


def test_shared_segments_give_identical_prefixes():
    s = Scenario.from_dict(BASE)
    a, b = (own_prompt_tokens(s, r) for r in s.requests)
    assert a[:70] == b[:70] and len(a) == 75


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"engine": {"mamba_block_size": 60, "block_size": 16}}, "engine.mamba_block_size"),
        ({"engine": {"spec_decode": "medusa"}}, "engine.spec_decode"),
        ({"engine": {"max_num_batched_tokens": "lots"}}, "engine.max_num_batched_tokens"),
        ({"engine": {"bogus": 1}}, "engine.bogus"),
        ({"requests": [{"id": "a", "prompt": ["nope"]}]}, "requests[0].prompt[0]"),
        ({"requests": [{"id": "a", "prompt": [3], "max_tokens": 0}]}, "requests[0].max_tokens"),
        ({"requests": [{"id": "a", "prompt": [3]}, {"id": "a", "prompt": [3]}]}, "requests[1].id"),
        ({"requests": [{"id": "a", "prompt": [3], "continues": "z"}]}, "requests[0].continues"),
        ({"requests": []}, "requests"),
        ({"gdnfuzz_scenario": 9}, "gdnfuzz_scenario"),
    ],
)
def test_invalid_input_names_the_field(patch, field):
    data = {**BASE, **patch}
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.field_path == field


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**BASE, "engine": {"num_speculative_tokens": 2}}))
    with pytest.raises(ScenarioError) as err:
        load_scenario(bad)
    assert str(bad) in str(err.value) and "engine.num_speculative_tokens" in str(err.value)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ScenarioError, match="broken.json: <json>"):
        load_scenario(broken)
