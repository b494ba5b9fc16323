"""gdnfuzz confirm: a finding the CPU engine cannot run (MTP) is decided on the kernel tier, and says so."""

from __future__ import annotations

import json
from pathlib import Path

from fuzz.confirm import confirm_bundle
from fuzz.crash_store import Finding, save_finding
from fuzz.policies import resolve_policy
from fuzz.replay import replay
from fuzz.scenario import load_scenario
from fuzz.signature import signature

CASE = Path(__file__).resolve().parent.parent / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"


def test_mtp_finding_is_confirmed_on_the_kernel_tier(tmp_path):
    scenario, _ = load_scenario(CASE)
    replayed = replay(scenario, resolve_policy("pre-51113"), resolve_policy("vllm"))
    sig = signature(replayed.verdict, scenario, replayed.candidate)
    bundle = save_finding(Finding(sig, scenario, scenario, replayed.verdict, "pre-51113", "vllm",
                                  replayed.candidate), tmp_path, None)
    assert confirm_bundle(bundle) == "confirmed"
    evidence = json.loads((bundle / "verdict.json").read_text())["confirmation"]
    assert evidence["engine_verdict"] == "unsupported"
    assert evidence["fallback"]["tier"] == "kernels" and evidence["fallback"]["verdict"] == "diverged"
