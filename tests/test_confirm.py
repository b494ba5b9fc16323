"""gdnfuzz confirm: the PR #51113 finding (MTP) is confirmed on the real CPU engine; a configuration
the engine cannot run is decided on the kernel tier, and the evidence names the tier and input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import default_fail_on, finding_signature
from fuzz.report.finding_report import store_finding
from fuzz.triage.confirm import confirm_bundle

CASE = Path(__file__).resolve().parent.parent / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"
# The engine refuses B=48 (the CPU attention backend needs a multiple of 32); b resumes from the
# slot hashed as state@48, which the naive split filled with state@40.
ODD_BLOCK = Scenario.from_dict({
    "gdnfuzz_scenario": 1,
    "segments": {"sys": 60},
    "engine": {"mamba_block_size": 48, "block_size": 48, "hash_block_size": 48, "step_budgets": [20]},
    "requests": [
        {"id": "a", "prompt": ["sys"], "max_tokens": 2},
        {"id": "b", "prompt": ["sys", 5], "arrival_step": 8, "max_tokens": 6},
    ],
})


def _bundle(tmp_path: Path, scenario: Scenario, candidate: str) -> Path:
    replayed = replay(scenario, resolve_policy(candidate), resolve_policy("vllm"))
    assert replayed.verdict.status == "diverged"
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, default_fail_on())
    return store_finding(Finding(sig, scenario, scenario, replayed.verdict, candidate, "vllm", replayed.candidate),
                        tmp_path, None)


def _evidence(bundle: Path) -> dict:
    return json.loads((bundle / "verdict.json").read_text())["confirmation"]


@pytest.mark.slow
def test_mtp_finding_is_confirmed_on_the_engine(tmp_path):
    bundle = _bundle(tmp_path, load_scenario(CASE)[0], "pre-51113")
    assert confirm_bundle(bundle) == "confirmed"
    evidence = _evidence(bundle)
    assert (evidence["tier"], evidence["input"], evidence["engine_verdict"]) == ("engine", "scenario.json", "poisoned")
    assert any("state@1600 holds state@364" in slot for slot in evidence["poisoned_slots"])
    assert "fallback" not in evidence


def test_a_block_size_the_engine_refuses_is_decided_on_the_kernel_tier(tmp_path):
    bundle = _bundle(tmp_path, ODD_BLOCK, "naive")
    assert confirm_bundle(bundle) == "confirmed"
    evidence = _evidence(bundle)
    assert evidence["engine_verdict"] == "unsupported" and "multiple of 32" in " ".join(evidence["notes"])
    assert evidence["fallback"]["tier"] == "kernels" and evidence["fallback"]["verdict"] == "diverged"
