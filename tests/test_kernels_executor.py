"""Kernel tier replay on hand-made schedules (no vLLM): clean resumes agree, poisoned ones diverge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuzz.model.result import Chunk, RequestOutcome, RunResult, StepRecord
from fuzz.model.scenario import Scenario
from workers.kernels.backends import BACKENDS
from workers.kernels.executor import KernelExecutor, _split_copies
from workers.kernels.schedule import ScheduleEntry, read_schedule, request_tokens, write_schedule

ROOT = Path(__file__).resolve().parent.parent
B = 16  # Mamba block size of the hand-made schedules

SCENARIO = Scenario.from_dict(
    {
        "gdnfuzz_scenario": 1,
        "seed": 7,
        "engine": {"mamba_block_size": B, "block_size": B, "max_num_batched_tokens": 64},
        "segments": {"p": 2 * B},
        "requests": [{"id": "a", "prompt": ["p", 8], "max_tokens": 6}, {"id": "b", "prompt": ["p", 10]}],
    }
)


def _chunk(rid: str, start: int, n: int, read: int | None, writes: list[int], drafts: int = 0) -> Chunk:
    """A chunk as vLLM's runner records it; its running column is cdiv(start + n, B) - 1."""
    return Chunk(rid, start, n, drafts, -(-(start + n) // B) - 1, read, writes)


def _step(i: int, chunks: list[Chunk], copies: list[list[int]] | None = None) -> StepRecord:
    return StepRecord(i, 64, chunks, copies or [])


def _entry(steps: list[StepRecord], a_outputs: list[int], b_resume_ok: bool = True) -> ScheduleEntry:
    """The sim's verdict on b's resume rides along, as the sim tier would record it."""
    result = RunResult(
        tier="sim",
        policy="hand",
        scenario_id=SCENARIO.scenario_id(),
        requests={
            "a": RequestOutcome("a", 40, output_tokens=a_outputs),
            "b": RequestOutcome("b", 42, hit_tokens=2 * B, resume_state_ok=b_resume_ok, output_tokens=[11]),
        },
        steps=steps,
    )
    return ScheduleEntry(SCENARIO, result, request_tokens(SCENARIO, result))


def _b_resumes(first_step: int) -> list[StepRecord]:
    """b hits 2B cached tokens in block 2, copies it to its running block 4, prefills 10, decodes 1."""
    return [
        _step(first_step, [_chunk("b", 2 * B, 10, 4, [4])], [[2, 4]]),
        _step(first_step + 1, [_chunk("b", 42, 1, 4, [4])]),
    ]


def aligned_entry() -> ScheduleEntry:
    """a's chunks end on block boundaries, so block 2 holds state@32 as its hash claims."""
    steps = [
        _step(0, [_chunk("a", 0, B, None, [1])]),
        _step(1, [_chunk("a", B, B, 2, [2])], [[1, 2]]),
        _step(2, [_chunk("a", 2 * B, 8, 3, [3])], [[2, 3]]),
        _step(3, [_chunk("a", 40, 1, 3, [3])]),
    ]
    return _entry(steps + _b_resumes(4), [101, 102])


def poisoned_entry() -> ScheduleEntry:
    """The #51113 shape: a's first chunk ends mid-block 1, the next crosses it; block 2 keeps state@20."""
    steps = [
        _step(0, [_chunk("a", 0, 20, None, [2])]),
        _step(1, [_chunk("a", 20, 20, 3, [3])], [[2, 3]]),
    ]
    return _entry(steps + _b_resumes(2), [101], b_resume_ok=False)


def spec_entry() -> ScheduleEntry:
    """a verifies 2 drafts per step (columns 2..4 = blocks 3, 5, 6), accepting 1 then 2; b resumes beside it."""
    steps = [
        _step(0, [_chunk("a", 0, 2 * B, None, [2])]),
        _step(1, [_chunk("a", 2 * B, 8, 3, [3])], [[2, 3]]),
        _step(
            2,
            [
                _chunk("a", 40, 3, 3, [3, 5, 6], 2),
                _chunk("b", 2 * B, 10, 4, [4]),
            ],
            [[2, 4]],
        ),
        _step(3, [_chunk("a", 42, 3, 5, [3, 5, 6], 2)]),
        _step(4, [_chunk("a", 45, 1, 6, [3])]),
    ]
    return _entry(steps, [101, 102, 103, 104, 105, 106])


@pytest.fixture(scope="module")
def torch_executor() -> KernelExecutor:
    return KernelExecutor(backend="torch")


def test_aligned_schedule_agrees_with_one_shot(torch_executor):
    report = torch_executor.replay(aligned_entry())
    assert set(report.requests) == {"a", "b"}
    assert report.requests["b"].positions == 11
    assert not report.diverging(), report.requests


def test_poisoned_resume_diverges_far_above_tolerance(torch_executor):
    report = torch_executor.replay(poisoned_entry())
    assert report.requests["a"].divergence <= report.tolerance
    b = report.requests["b"]
    assert b.divergence > 100 * report.tolerance
    assert b.first_bad == 2 * B
    result = torch_executor.to_run_result(poisoned_entry(), report)
    assert result.requests["b"].resume_state_ok is False
    assert [f.request_id for f in result.faults] == ["b"]


def test_canary_one_token_short_is_detected(torch_executor):
    canary = KernelExecutor(backend="torch", canary_shift=1)
    report = canary.replay(aligned_entry())
    assert report.requests["b"].divergence > 10 * report.tolerance
    assert report.requests["a"].divergence <= report.tolerance


def test_spec_verify_steps_write_per_position_states(torch_executor):
    entry = spec_entry()
    report = torch_executor.replay(entry)
    assert not report.diverging(), report.requests
    # positions 40..46 are fed true tokens except the rejected draft at 42 (step 2 accepted 1 of 2)
    assert report.requests["a"].positions == 40 + 2 + 3 + 1
    # resuming from the state after the rejected draft (block 6) must diverge
    entry.result.steps[3].chunks[0].read_block = 6
    assert torch_executor.replay(entry).requests["a"].divergence > 100 * report.tolerance


def test_schedule_file_round_trip(tmp_path, torch_executor):
    path = tmp_path / "schedule.json"
    write_schedule(path, [poisoned_entry(), aligned_entry()])
    entries = read_schedule(path)
    expected = [poisoned_entry(), aligned_entry()]
    assert [e.result.to_dict() for e in entries] == [e.result.to_dict() for e in expected]
    assert [e.tokens for e in entries] == [e.tokens for e in expected]
    reports = [torch_executor.replay(e) for e in entries]
    assert [bool(r.diverging()) for r in reports] == [True, False]


def test_sim_failure_is_reported_unsupported(torch_executor):
    entry = aligned_entry()
    entry.result.status = "unsupported"
    entry.result.notes.append("spec decode needs a GPU")
    result = torch_executor.to_run_result(entry, torch_executor.replay(entry))
    assert result.status == "unsupported"


def test_outputs_depend_only_on_tokens_and_state(torch_executor):
    a = torch_executor.one_shot([5, 6, 7, 8], torch_executor.replay(aligned_entry()))
    b = KernelExecutor(backend="torch").one_shot([5, 6, 7, 8], torch_executor.replay(aligned_entry()))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_replay_cli_runs_without_vllm(tmp_path):
    """The GPU worker has no vLLM: replaying a schedule file must not import it."""
    path = tmp_path / "schedule.json"
    write_schedule(path, [poisoned_entry()])
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from workers.kernels.__main__ import main\n"
        f"sys.exit(main(['replay', '--schedule', {str(path)!r}, '--backend', 'torch', '--out', {str(tmp_path)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1, done.stderr  # diverged, and in agreement with the (hand-made) sim verdict
    assert "diverged" in done.stdout and "agrees" in done.stdout
    rows = json.loads((tmp_path / "kernel_replay_torch.json").read_text())
    assert rows[0]["kernel_diverging"] == ["b"]


def _corpus_entries() -> dict[tuple[str, str], ScheduleEntry]:
    """bench/kernel_schedule.json (the sim tier's runs of the regression corpus) by (file stem, policy)."""
    return {(Path(e.source).stem, e.result.policy): e for e in read_schedule(ROOT / "bench" / "kernel_schedule.json")}


def test_corpus_schedule_diverges_only_under_pre_51113(torch_executor):
    """The production trigger; the slot the sim names poisoned is wrong on the kernels too, and holds what
    the sim says it holds."""
    entries = _corpus_entries()
    verdicts = {policy: torch_executor.replay(entries["pr51113-concurrent-prefills", policy])
                for policy in ("pre-51113", "vllm")}
    bad = verdicts["pre-51113"]
    assert {d.request_id for d in bad.diverging()} == {"follower"}
    assert bad.requests["follower"].divergence > 1000 * bad.tolerance
    [named] = entries["pr51113-concurrent-prefills", "pre-51113"].result.poisoned
    [check] = bad.slots
    assert (check.kind, check.block, check.claimed_tokens, check.held_tokens) == (
        "poisoned", named.block_id, named.claimed_tokens, named.held_tokens)
    assert check.error > 100 * bad.tolerance and check.held_error <= bad.tolerance
    assert not verdicts["vllm"].diverging() and not verdicts["vllm"].slots


def test_internal_checkpoints_need_the_export_kernel_and_connector_loads_are_not_modeled(torch_executor):
    entries = _corpus_entries()
    checkpoint = entries["internal-checkpoint-midblock-resume-mtp", "vllm"]
    report = torch_executor.replay(checkpoint)
    assert "Mamba2's export kernel" in report.unsupported and "triton-interpret" in report.unsupported
    assert torch_executor.to_run_result(checkpoint, report).status == "unsupported"
    assert "connector" in torch_executor.replay(entries["internal-checkpoint-midblock-resume", "vllm"]).unsupported


@pytest.mark.slow
@pytest.mark.skipif(not BACKENDS["triton-interpret"].available(), reason="no Triton interpreter or vLLM kernels")
def test_internal_checkpoint_bug_on_the_kernels_with_mamba2s_export_kernel():
    """vLLM's bug on record (corpus/regressions/internal-checkpoint-midblock-resume-mtp.json): a resume mid-block
    with internal checkpoints leaves the block of the chunk's first column hashed as state@32 while it holds
    state@16. Replayed with vLLM's GDN kernels and Mamba2's export kernel under the interpreter, that block is
    the one the sim names, it is wrong on the kernels and holds exactly state@16; the exported checkpoint is
    right; under pre-51113 nothing is named and the checkpoint is right too."""
    from workers.kernels.__main__ import replay_rows

    executor = KernelExecutor(backend="triton-interpret")
    entries = _corpus_entries()
    entry = entries["internal-checkpoint-midblock-resume-mtp", "vllm"]
    report = executor.replay(entry)
    [named] = entry.result.poisoned
    [exported] = [c for c in entry.result.steps[named.step].chunks if c.checkpoint_block is not None]
    checks = {c.kind: c for c in report.slots}
    assert set(checks) == {"poisoned", "checkpoint"}
    poisoned, checkpoint = checks["poisoned"], checks["checkpoint"]
    assert (poisoned.block, poisoned.column, poisoned.claimed_tokens, poisoned.held_tokens) == (named.block_id, 0, 32, 16)
    assert poisoned.error > 100 * report.tolerance and poisoned.held_error <= report.tolerance
    assert (checkpoint.block, checkpoint.claimed_tokens) == (exported.checkpoint_block, exported.checkpoint_tokens)
    assert checkpoint.error <= report.tolerance
    assert not report.diverging()  # nobody resumes from the poisoned block in this scenario
    result = executor.to_run_result(entry, report)
    assert [(p.block_id, p.claimed_tokens, p.held_tokens) for p in result.poisoned] == [(named.block_id, 32, 16)]
    assert not result.faults
    rows = replay_rows([entry, entries["internal-checkpoint-midblock-resume-mtp", "pre-51113"]], executor)
    assert [(r["status"], r["agrees_with_sim"]) for r in rows] == [("diverged", True), ("clean", True)]
    assert [c["kind"] for c in rows[1]["slots"]] == ["checkpoint"]


def test_copies_split_into_preprocess_and_spec_postprocess():
    """A verify chunk that moved column gets its running state first; the boundary state it crossed is saved after."""
    steps = [
        _step(0, [_chunk("a", 0, 30, None, [2])]),
        # a moves to column 2 (copy 2 -> 3 first), verifies 2 drafts; crossing 32 saves block 5 into block 2 after
        _step(1, [_chunk("a", 30, 3, 3, [3, 5, 6], 2)], [[2, 3], [5, 2]]),
    ]
    result = RunResult(tier="sim", policy="hand", scenario_id="x", steps=steps)
    assert _split_copies(result, B) == {0: ([], []), 1: ([[2, 3]], [[5, 2]])}


def test_run_result_carries_only_kernel_observations(torch_executor):
    entry = aligned_entry()
    entry.result.requests["a"].expected_tokens = [101, 102]
    result = torch_executor.to_run_result(entry, torch_executor.replay(entry))
    assert result.tier == "kernels" and not result.faults
    assert all(o.output_tokens == [] and o.expected_tokens is None for o in result.requests.values())
    assert result.requests["b"].resume_state_ok is True and result.requests["a"].resume_state_ok is None


def test_a_replay_past_its_deadline_is_a_hang_not_an_agreement(monkeypatch):
    """The interpreter is slow: a replay cut off by the deadline shows nothing, which is no agreement with the
    sim's bad resume (and its backend sets a longer deadline: 3600 s for triton-interpret)."""
    import time

    from fuzz.model.deadline import DEADLINE_ENV
    from workers.kernels.__main__ import replay_rows
    from workers.kernels.backends import TritonInterpretBackend

    executor = KernelExecutor(backend="torch")
    forward = executor._forward

    def slow(*args, **kwargs):
        time.sleep(2)
        return forward(*args, **kwargs)

    monkeypatch.setattr(executor, "_forward", slow)
    monkeypatch.setenv(DEADLINE_ENV, "0.3")
    [row] = replay_rows([poisoned_entry()], executor)
    assert (row["status"], row["agrees_with_sim"]) == ("hang", False)
    assert "deadline in step 0" in row["note"]
    monkeypatch.delenv(DEADLINE_ENV)
    assert executor.deadline() == 120 and TritonInterpretBackend.deadline_s == 3600
