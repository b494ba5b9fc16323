"""The engine tier on vLLM's real CPU engine: runs, audit, canary, a confirmed divergence, faults.

One EngineExecutor (one child process, engines kept warm) serves the whole module; the hang test
runs last because it kills that child.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import Scenario, load_scenario
from workers.engine.executor import OUTPUT_TOLERANCE, EngineExecutor, canary_caught, output_divergence
from workers.engine.session import CANARY_OFFSET, STATE_TOLERANCE, unsupported_reason

pytestmark = pytest.mark.slow  # every test here runs vLLM's real engine

# Request a fills a 1610-token prompt in chunks of 364 then the rest; b shares its first 1610
# tokens, arrives after a finished, and resumes from the slot hashed as state@1600 with 15 tokens
# left to prefill, so its outputs depend directly on that slot.
FRAGMENTED = Scenario.from_dict({
    "gdnfuzz_scenario": 1,
    "segments": {"sys": 1610},
    "engine": {"mamba_block_size": 1600, "step_budgets": [364]},
    "requests": [
        {"id": "a", "prompt": ["sys"], "max_tokens": 4},
        {"id": "b", "prompt": ["sys", 5], "arrival_step": 6, "max_tokens": 8},
    ],
})
# No partial hash hits and a prompt shorter than B: no Mamba slot is ever hashed.
SHORT = Scenario.from_dict({
    "gdnfuzz_scenario": 1,
    "engine": {"mamba_block_size": 1600, "block_size": 1600, "hash_block_size": 1600},
    "requests": [{"id": "a", "prompt": [100], "max_tokens": 2}],
})


REGRESSIONS = Path(__file__).resolve().parent.parent / "corpus" / "regressions"
# The engine refuses some corpus configurations on this platform (a KV connector with a worker side,
# Mamba2 checkpoint export): those are checked to be refused with their reason, never "agreed".
CORPUS = [p for p in sorted(REGRESSIONS.glob("*.json")) if unsupported_reason(load_scenario(p)[0]) is None]
REFUSED = [p for p in sorted(REGRESSIONS.glob("*.json")) if p not in CORPUS]


@pytest.fixture(scope="module")
def engine():
    with EngineExecutor() as executor:
        yield executor


@pytest.fixture(scope="module")
def reference_runs(engine):
    return engine.run(FRAGMENTED, resolve_policy("vllm")), engine.truth(FRAGMENTED)


def test_reference_run_is_clean_and_matches_truth(reference_runs):
    run, truth = reference_runs
    assert run.status == "ok" and not run.faults, run.faults
    assert run.hashed_mamba_blocks >= 1 and not run.poisoned
    b = run.requests["b"]
    assert b.hit_tokens == 1600 and b.resume_state_ok is True
    assert len(b.output_tokens) == 8 and len(b.logprobs) == 8 and b.top_logprobs
    assert [c.num_tokens for _, c in run.chunk_table("a")][:2] == [364, 1236]  # vLLM's split stops at 1600
    assert truth.requests["b"].hit_tokens == 0
    assert max(output_divergence(run, truth).values()) <= OUTPUT_TOLERANCE


def test_canary_is_detected_and_moves_outputs_beyond_noise(engine, reference_runs):
    run, truth = reference_runs
    canary = engine.run_canary(FRAGMENTED)
    assert canary_caught(canary)
    slot = canary.poisoned[0]
    assert slot.claimed_tokens == 1600 and slot.held_tokens == 1600 - CANARY_OFFSET
    noise = max(output_divergence(run, truth).values())
    assert output_divergence(canary, run)["b"] > max(OUTPUT_TOLERANCE, 3 * noise)


def test_naive_split_poison_is_confirmed_on_real_state(engine, reference_runs):
    run, truth = reference_runs
    naive = engine.run(FRAGMENTED, resolve_policy("naive"))
    assert [(p.column, p.claimed_tokens, p.held_tokens) for p in naive.poisoned] == [(0, 1600, 364)]
    assert float(naive.poisoned[0].held.split("distance ")[1].split(",")[0]) > 10 * STATE_TOLERANCE
    assert naive.requests["b"].resume_state_ok is False
    assert output_divergence(naive, truth)["b"] > OUTPUT_TOLERANCE
    assert output_divergence(run, truth)["b"] <= OUTPUT_TOLERANCE
    assert engine.outputs_differ(naive.requests["b"], truth.requests["b"])
    assert not engine.outputs_differ(run.requests["b"], truth.requests["b"])


def test_poison_verdicts(engine):
    assert engine.poison_verdict(FRAGMENTED, resolve_policy("naive")).verdict == "poisoned"
    assert engine.poison_verdict(FRAGMENTED, resolve_policy("vllm")).verdict == "clean"
    # Nothing is cached, so no canary can be planted: no evidence either way.
    assert engine.poison_verdict(SHORT, resolve_policy("vllm")).verdict == "inconclusive"


def test_mtp_runs_in_align_mode_on_cpu(engine):
    """MTP + align on the CPU engine (workers.engine.cpu_align_kernels), on the production trigger: the
    pre-PR-51113 split poisons the slot at 1600 with state@364, vLLM's does not, and the canary is
    caught in that configuration."""
    scenario = load_scenario(REGRESSIONS / "pr51113-concurrent-prefills.json")[0]
    assert (scenario.engine.spec_decode, scenario.engine.num_spec_tokens) == ("mtp", 3)
    bad = engine.poison_verdict(scenario, resolve_policy("pre-51113"))
    assert bad.verdict == "poisoned", bad.result.notes
    assert [(p.claimed_tokens, p.held_tokens) for p in bad.result.poisoned] == [(1600, 364)]
    assert bad.result.requests["follower"].resume_state_ok is False
    assert engine.poison_verdict(scenario, resolve_policy("vllm")).verdict == "clean"


@pytest.mark.parametrize("policy", ["naive", "pre-51113"])
@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_sim_and_engine_agree_on_poisoned_slots(engine, sim, path, policy):
    """The corpus entries as written (MTP, B=1600): every slot the sim finds poisoned, the engine
    finds poisoned with the same claimed and held positions, and neither finds one where the other
    finds none. The engine may find more: its drafts are accepted as the model decides, not as the
    scenario's ``accept`` lists say, so a concurrent request's later chunks can end elsewhere."""
    scenario = load_scenario(path)[0]
    split = resolve_policy(policy)
    expected = {(p.column, p.claimed_tokens, p.held_tokens) for p in sim.run(scenario, split).poisoned}
    run = engine.run(scenario, split)
    assert run.status == "ok" and not run.faults, run.notes
    found = {(p.column, p.claimed_tokens, p.held_tokens) for p in run.poisoned}
    assert expected <= found and bool(expected) == bool(found)


@pytest.mark.parametrize("path", REFUSED, ids=[p.stem for p in REFUSED])
def test_the_engine_refuses_what_it_cannot_run_and_says_why(engine, path):
    """No verdict, no agreement claimed: the run is ``unsupported`` and its note names the reason."""
    scenario = load_scenario(path)[0]
    run = engine.run(scenario, resolve_policy("vllm"))
    assert run.status == "unsupported" and not run.poisoned
    assert run.notes == [f"unsupported on this platform: {unsupported_reason(scenario)}"]


def _configuration_classes() -> dict[str, list[Path]]:
    """The corpus entries by engine configuration (the knobs that are not per-step budgets)."""
    classes: dict[str, list[Path]] = {}
    for path in CORPUS:
        knobs = load_scenario(path)[0].engine
        key = (f"B{knobs.mamba_block_size}-hash{knobs.hash_block_size}-ret{knobs.retention_interval}"
               f"-{knobs.spec_decode}{knobs.num_spec_tokens}")
        classes.setdefault(key, []).append(path)
    return classes


@pytest.mark.parametrize("paths", list(_configuration_classes().values()), ids=list(_configuration_classes()))
def test_canary_is_detected_in_every_corpus_configuration(engine, paths):
    """Some entry of each configuration caches a slot a later request reads, and its canary is caught
    (entries that cache nothing cannot plant one: their clean verdicts stay inconclusive)."""
    assert any(engine.canary_detected(load_scenario(path)[0]) for path in paths)


def _policy_file(tmp_path: Path, body: str) -> str:
    path = tmp_path / "bad_policy.py"
    path.write_text(f"def split(self, request, num_new_tokens, a=0, b=0):\n    {body}\n")
    return f"{path}:split"


def test_a_raising_split_is_a_contract_fault_then_a_liveness_fault(engine, tmp_path):
    """As on the sim tier: the exception is the policy's finding (answered with 0), and a split that
    never schedules ends the run after STALL_STEPS steps, leaving nothing behind in the warm engine."""
    run = engine.run(SHORT, resolve_policy(_policy_file(tmp_path, "raise AssertionError('split exploded')")))
    kinds = [f.kind for f in run.faults]
    assert set(kinds) == {"contract", "liveness"} and kinds[-1] == "liveness", run.faults
    assert "AssertionError(split exploded)" in run.faults[0].detail
    assert engine.run(SHORT, resolve_policy("vllm")).requests["a"].output_tokens


def test_engine_crash_is_a_fault_and_the_engine_is_rebuilt(engine, tmp_path):
    """The engine's process dying mid-run (a segfault, a CUDA illegal access: here a SIGKILL while a slow
    split is being asked) is an ``engine-crash`` fault of that run, and the next run gets a rebuilt engine.
    (A split can no longer break vLLM's scheduler from inside: it sees read-only views, ``fuzz.sandbox``.)"""
    import signal
    import threading
    import time

    engine.run(SHORT, resolve_policy("vllm"))  # warm: the kill below lands in the slow run, not a start-up
    slow = resolve_policy(_policy_file(tmp_path, "import time; time.sleep(120); return num_new_tokens"))
    result = {}
    running = threading.Thread(target=lambda: result.update(run=engine.run(SHORT, slow)))
    running.start()
    time.sleep(10)  # the run is in the engine's process for 120 s at least: the kill lands inside it
    os.kill(engine._child.pid, signal.SIGKILL)
    running.join(timeout=300)
    crash = result["run"]
    assert [f.kind for f in crash.faults] == ["engine-crash"] and "died" in crash.faults[0].detail
    assert engine.run(SHORT, resolve_policy("vllm")).requests["a"].output_tokens


def test_confirm_records_a_sim_finding_as_confirmed(engine, sim, tmp_path):
    from fuzz.oracle.differential import judge
    from fuzz.oracle.finding import Finding
    from fuzz.oracle.verdict import default_fail_on, finding_signature
    from fuzz.report.finding_report import store_finding
    from fuzz.store.bundle import load_bundle
    from fuzz.triage.confirm import confirm_bundle

    naive, vllm = resolve_policy("naive"), resolve_policy("vllm")
    run = sim.run(FRAGMENTED, naive)
    verdict = judge(FRAGMENTED, run, sim.run(FRAGMENTED, vllm), sim.truth(FRAGMENTED))
    sig = finding_signature(verdict, FRAGMENTED, run, default_fail_on())
    bundle = store_finding(Finding(sig, FRAGMENTED, FRAGMENTED, verdict, "naive", "vllm", run), tmp_path, None)
    assert confirm_bundle(bundle, executor=engine) == "confirmed"
    confirmed = load_bundle(bundle).verdict
    assert confirmed["confirmed"] == "confirmed" and confirmed["confirmation"]["poisoned_slots"]


def test_hung_step_times_out(engine, tmp_path):
    engine.run(SHORT, resolve_policy("vllm"))  # warm, so the timeout below only covers the hung run
    engine.timeout_s = 20
    hang = engine.run(SHORT, resolve_policy(_policy_file(tmp_path, "import time; time.sleep(600)")))
    assert [f.kind for f in hang.faults] == ["hang"]



def test_a_pool_vllm_sizes_down_runs_only_scenarios_it_holds_whole():
    """vLLM 0.32.0's engine refuses a KV pool below one max_model_len request and names what it holds; the
    engine is built with that max_model_len, and a scenario with a longer request is unsupported."""
    from types import SimpleNamespace

    from workers.engine.session import POOL_HOLDS, too_long_for

    refusal = ("To serve at least one request with the model's max seq len (16384), (0.25 GiB KV cache is needed, "
               "which is larger than the available KV cache memory (0.02 GiB). Based on the available memory, "
               "the estimated maximum model length is 1408. Try increasing `gpu_memory_utilization`")
    assert int(POOL_HOLDS.search(refusal).group(1)) == 1408
    engine = SimpleNamespace(vllm_config=SimpleNamespace(model_config=SimpleNamespace(max_model_len=1408)))
    fits = Scenario.from_dict({"gdnfuzz_scenario": 1, "engine": {"num_kv_blocks": 49},
                               "requests": [{"id": "r0", "prompt": [26], "max_tokens": 326}]})
    longer = Scenario.from_dict({"gdnfuzz_scenario": 1, "engine": {"num_kv_blocks": 49},
                                 "requests": [{"id": "r0", "prompt": [26], "max_tokens": 1400}]})
    assert too_long_for(engine, fits) is None
    assert "request r0 may hold 1427 tokens" in too_long_for(engine, longer)  # 26 + 1400 + 1 draft slot
