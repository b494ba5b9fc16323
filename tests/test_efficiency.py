"""The efficiency oracle: cost records, differential findings, verdicts, exit codes, minimization, bundles.

The mutants under bench/mutants/ keep every slot exact (correctness says clean) and cost more: one
ignores the EAGLE block drop (a follower loses its cache hit), one ends aligned chunks early (an
extra chunk, hence an extra forward pass, per aligned stop).
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import CORPUS

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.model.cost import run_cost
from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Request, Scenario, load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.efficiency import judge_efficiency
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import FailOn, finding_signature
from fuzz.reduce.minimize import minimize, reproduction_predicate
from fuzz.report.finding_report import store_finding
from fuzz.search.generate import random_scenario
from fuzz.store.bundle import load_bundle

LOST_HIT = CORPUS / "regressions" / "efficiency-ignore-eagle-block-drop-lost-hit.json"
IGNORE_DROP = "bench/mutants/ignore_eagle_block_drop.py:split"
EARLY_END = "bench/mutants/early_aligned_end.py:split"
VLLM = resolve_policy("vllm")


def _two_block_prompt() -> Scenario:
    """One 3 * 64 + 10 token prompt, budget 512: vLLM prefills it in one chunk."""
    return Scenario.from_dict(Scenario(
        engine=Scenario.from_dict({"gdnfuzz_scenario": 1, "requests": [{"id": "a", "prompt": [1]}]}).engine,
        segments={}, requests=(Request("a", (202,)),)).with_engine(
        mamba_block_size=64, max_num_batched_tokens=100).to_dict())


def test_cost_record_counts_passes_chunks_and_idle_budget(sim):
    scenario = _two_block_prompt()
    cost = run_cost(scenario, sim.run(scenario, VLLM))
    a = cost.requests["a"]
    # budget 100, B=64: vLLM ends chunks on 64, 128, 192, then the tail: 4 prefill chunks, 4 passes
    assert (a.prefill_chunks, a.hit_tokens, a.arrival_step, a.prefill_done_step) == (4, 0, 0, 3)
    assert cost.forward_passes >= 4
    # the first three steps ran 64 of 100 budget tokens while the prompt still waited
    assert cost.idle_budget == 3 * (100 - 64)
    assert cost.scheduled_tokens >= 202


def test_equal_runs_cost_the_same_and_give_no_efficiency_finding(sim):
    rng = random.Random(11)
    for _ in range(25):
        scenario = random_scenario(rng)
        a, b = (run_cost(scenario, sim.run(scenario, VLLM)) for _ in range(2))
        assert a == b
        assert judge_efficiency(a, b) == []


def test_a_lost_hit_is_regressed_not_diverged():
    scenario, _ = load_scenario(LOST_HIT)
    verdict = replay(scenario, resolve_policy(IGNORE_DROP), VLLM).verdict
    assert verdict.status == VerdictStatus.REGRESSED and verdict.of("correctness") == []
    [lost] = verdict.of("efficiency")
    assert lost.kind == "lost-cache-hit" and lost.details["amount"] == 16 and lost.request_id == "r2"
    assert finding_signature(verdict, scenario, replay(scenario, resolve_policy(IGNORE_DROP), VLLM).candidate,
                             FailOn("correctness")) == "clean"
    assert replay(scenario, VLLM, VLLM).verdict.status == VerdictStatus.CLEAN


def test_early_aligned_ends_cost_forward_passes(sim):
    scenario = _two_block_prompt()
    verdict = replay(scenario, resolve_policy(EARLY_END), VLLM).verdict
    assert verdict.status == VerdictStatus.REGRESSED
    kinds = {f.kind: f.details["amount"] for f in verdict.of("efficiency")}
    assert kinds["extra-forward-passes"] == 3  # one extra 8-token chunk before each of the three boundaries


@pytest.mark.parametrize(("fail_on", "code"), [("correctness", ExitCode.CLEAN), ("efficiency", ExitCode.REGRESSED),
                                               ("any", ExitCode.REGRESSED)])
def test_replay_exit_code_follows_fail_on(fail_on, code, capsys):
    assert main(["replay", str(LOST_HIT), "--candidate", IGNORE_DROP, "--fail-on", fail_on]) == code


def test_a_correctness_divergence_still_exits_1_under_any(capsys):
    seed = CORPUS / "regressions" / "pr51113-concurrent-prefills.json"
    assert main(["replay", str(seed), "--candidate", "pre-51113", "--fail-on", "any"]) == ExitCode.DIVERGED
    # its costs are a trade-off (the follower recomputes 384 tokens more; two fewer passes, three fewer steps to
    # first tokens): not an efficiency regression on its own
    assert main(["replay", str(seed), "--candidate", "pre-51113", "--fail-on", "efficiency"]) == ExitCode.CLEAN


def test_a_cheaper_candidate_is_never_regressed():
    """More cache hits (or fewer passes, or sooner first tokens) and nothing worse is never regressed, and
    neither is a trade-off: worse in one cost, better in another. Budget left idle is no cost of its own."""
    from fuzz.model.cost import RequestCost, RunCost

    def run(hit: int, passes: int, steps: int, idle: int) -> RunCost:
        request = RequestCost("a", 100, hit, 2, 0, steps - 1, "p")
        return RunCost(passes, 100 - hit, idle, 0, 0, int(hit > 0), {"a": request})

    reference = run(32, 3, 3, 0)
    assert judge_efficiency(run(48, 3, 3, 16), reference) == []  # more hits, more idle budget: cheaper
    assert judge_efficiency(run(16, 2, 3, 0), reference) == []  # fewer hits, one pass less: a trade-off
    assert [f.kind for f in judge_efficiency(run(16, 3, 3, 0), reference)] == ["lost-cache-hit"]
    assert [f.kind for f in judge_efficiency(run(32, 3, 4, 0), reference)] == ["later-first-token"]


def test_minimizing_keeps_the_signature_and_half_the_magnitude(tmp_path):
    candidate = resolve_policy(EARLY_END)
    scenario = _two_block_prompt()
    found = replay(scenario, candidate, VLLM)
    sig = finding_signature(found.verdict, scenario, found.candidate, FailOn("efficiency"))
    assert sig == "efficiency-split-stops-short-at-sub-block"  # it stops 8 tokens inside a block
    reproduces = reproduction_predicate(sig, found, candidate, VLLM, FailOn("efficiency"))
    report = minimize(scenario, reproduces, max_seconds=60)
    final = replay(report.minimized, candidate, VLLM)
    assert reproduces(report.minimized)
    relative = max(f.details["relative"] for f in final.verdict.of("efficiency") if f.kind == "extra-forward-passes")
    original = max(f.details["relative"] for f in found.verdict.of("efficiency") if f.kind == "extra-forward-passes")
    assert relative >= 0.5 * original

    finding = Finding(sig, scenario, report.minimized, final.verdict, candidate.spec, "vllm", final.candidate,
                      stages=report.stage_dicts(), reference_run=final.reference, fail_on=FailOn("efficiency"))
    bundle = load_bundle(store_finding(finding, tmp_path, None))
    assert bundle.verdict["class"] == "efficiency" and bundle.verdict["kind"] == "extra-forward-passes"
    assert bundle.verdict["symptom"] == "efficiency-extra-forward-passes-no-spec"
    assert bundle.annotations["expect"] == {candidate.spec: "regressed", "vllm": "clean"}
    assert "## What it costs" in bundle.report and f"`{candidate.spec}` beside `vllm`" in bundle.report
    assert "--fail-on efficiency" in bundle.report


def test_compare_prints_and_writes_the_ab_table(tmp_path, capsys):
    out = tmp_path / "cmp.json"
    assert main(["compare", str(LOST_HIT), "--candidate", IGNORE_DROP, "--json", str(out)]) == ExitCode.CLEAN
    text = capsys.readouterr().out
    assert "cache-hit tokens" in text and "lost cache-hit tokens in 1" in text
    report = json.loads(out.read_text())
    assert report["tiers"]["sim"]["totals"]["cache-hit tokens"] == {"candidate": 0, "reference": 16}
    page = tmp_path / "dash.html"
    assert main(["dashboard", "--crashes", str(tmp_path / "none"), "--out", str(page), "--compare", str(out)]) == 0
    assert "A/B cost" in page.read_text() and "cache-hit tokens per scenario" in page.read_text()


def test_a_bad_compare_report_is_an_input_error(tmp_path, capsys):
    bad = tmp_path / "cmp.json"
    bad.write_text(json.dumps({"candidate": "a", "reference": "b", "tiers": {"sim": {"totals": {}}}}))
    code = main(["dashboard", "--crashes", str(tmp_path), "--out", str(tmp_path / "d.html"), "--compare", str(bad)])
    assert code == ExitCode.BAD_INPUT
    assert "tiers.sim" in capsys.readouterr().err
