"""A corpus file's expectations per vLLM version: each status holds from its version on."""

from __future__ import annotations

import json

import pytest
from conftest import seed_case

from fuzz.model.expectations import as_found, expected_status, expected_statuses
from fuzz.model.knobs import EngineKnobs
from fuzz.model.scenario import ScenarioError, load_scenario

FIXED = {"pre-51113": "diverged", "vllm": {"0.32.0": "diverged", "0.33.0": "clean"},
         "knob": {"0.33.0": "diverged"}}


@pytest.mark.parametrize(("version", "vllm", "knob"), [
    ("0.31.0", None, None), ("0.32.0", "diverged", None), ("0.32.5", "diverged", None),
    ("0.33.0", "clean", "diverged"), ("0.33.1.dev12+g0abc", "clean", "diverged"), ("0.40.0", "clean", "diverged")])
def test_each_status_holds_from_its_version_on(version, vllm, knob):
    assert expected_status(FIXED, "pre-51113", version) == "diverged"
    assert expected_status(FIXED, "vllm", version) == vllm
    assert expected_status(FIXED, "knob", version) == knob
    assert expected_status(FIXED, "naive", version) is None
    assert set(expected_statuses(FIXED, version)) == {p for p, s in (("pre-51113", 1), ("vllm", vllm),
                                                                       ("knob", knob)) if s}


def test_a_versioned_expectation_is_read_and_a_bad_one_named(tmp_path):
    data = json.loads(seed_case().read_text())
    good = tmp_path / "good.json"
    good.write_text(json.dumps({**data, "expect": FIXED}))
    assert load_scenario(good)[1]["expect"] == FIXED
    for bad in ({"vllm": {"0.33": "fine"}}, {"vllm": {"latest": "clean"}}, {"vllm": 3}):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({**data, "expect": bad}))
        with pytest.raises(ScenarioError, match=r"expect\.vllm: .* is not one of clean, .*nor an object of vLLM version"):
            load_scenario(path)


def test_a_finding_on_a_knob_older_vllms_lack_expects_nothing_of_them():
    plain = EngineKnobs(spec_decode="mtp", num_speculative_tokens=2)
    assert as_found({"x": "diverged", "vllm": "clean"}, plain) == {"x": "diverged", "vllm": "clean"}
    gated = EngineKnobs(spec_decode="mtp", num_speculative_tokens=2, disable_lookahead_block_hashes=True)
    assert as_found({"x": "diverged"}, gated) == {"x": {"0.33.0": "diverged"}}
