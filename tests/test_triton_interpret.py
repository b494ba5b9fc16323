"""vLLM's own Triton kernels under Triton's interpreter (``workers.triton_interpret``): every entry point runs
with every workaround, each workaround is what lets its kernels run on this Triton (an upgrade that makes
one unneeded fails here), and nothing of vLLM's or Triton's stays changed. Tiny shapes: the interpreter is
slow."""

from __future__ import annotations

import sys

import pytest
import torch

from workers.triton_interpret import ALL, Workaround, interpreted, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

# Without a workaround: the entry points that fail, with the interpreter's error and the construct (Triton 3.9,
# vLLM 0.32); every other entry point runs.
FAILS_WITHOUT = {
    Workaround.SINGLE_CONFIG: {
        "chunk_gated_delta_rule": ("RuntimeError: 0 active drivers", "chunk_local_cumsum_scalar_kernel[grid]("),
    },
    Workaround.BUILTIN_ALIASES: {
        "chunk_gated_delta_rule": ("Did you forget to add @triton.jit", "b_A = b_A * exp(b_g_diff)"),
        "fused_recurrent_gated_delta_rule": ("Did you forget to add @triton.jit", "b_h *= exp(b_g)"),
    },
    Workaround.LOOP_INDEX: {
        "chunk_gated_delta_rule": ("'int' object has no attribute 'to'", "i_t.to(tl.int64)"),
    },
    Workaround.STDLIB: {
        "chunk_gated_delta_rule": ("Cannot call @triton.jit'd outside of the scope of a kernel", "tl.sum("),
        "fused_recurrent_gated_delta_rule": ("Cannot call @triton.jit'd", "tl.zeros("),
        "precopy_mamba_align_fused_kernel": ("Cannot call @triton.jit'd", "tl.cdiv("),
        "postprocess_mamba_fused_kernel": ("Cannot call @triton.jit'd", "tl.cdiv("),
    },
    Workaround.BOOL_MASK: {
        "store_prefill_checkpoint": ("mask has unsupported dtype", "tl.load("),
    },
}


@pytest.mark.slow
def test_every_entry_point_runs_with_every_workaround():
    from workers.kernels.probe import ENTRY_POINTS, probe

    results = probe(ALL)
    assert {name: r.failure for name, r in results.items()} == dict.fromkeys(ENTRY_POINTS)
    assert results["chunk_gated_delta_rule"].launched == [
        "l2norm_fwd_kernel2", "l2norm_fwd_kernel2", "chunk_local_cumsum_scalar_kernel",
        "chunk_scaled_dot_kkt_fwd_kernel", "merge_16x16_to_64x64_inverse_kernel", "recompute_w_u_fwd_kernel",
        "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o"]
    assert results["fused_recurrent_gated_delta_rule"].launched == ["fused_recurrent_gated_delta_rule_fwd_kernel"]


@pytest.mark.slow
@pytest.mark.parametrize("workaround", list(Workaround), ids=str)
def test_each_workaround_is_what_lets_its_kernels_run(workaround):
    from workers.kernels.probe import probe

    results = probe(ALL - {workaround})
    failing = {name: r.failure for name, r in results.items() if r.failure is not None}
    assert set(failing) == set(FAILS_WITHOUT[workaround])
    for name, (error, construct) in FAILS_WITHOUT[workaround].items():
        assert error in failing[name].error and construct in failing[name].construct, failing[name]


@pytest.mark.slow
def test_vllm_and_triton_are_as_they_were():
    """The copies hold interpreted kernels; vLLM's own modules keep their placeholders, Triton its JIT library."""
    import triton
    import triton.language as tl
    import vllm.triton_utils
    from triton.runtime.interpreter import InterpretedFunction, InterpreterBuilder
    from triton.runtime.jit import JITFunction
    from vllm.third_party.flash_linear_attention.ops import fused_recurrent

    load = InterpreterBuilder.create_masked_load
    runtime = interpreted()
    copy = runtime.module("fla")
    with runtime.running():
        assert isinstance(tl.sum, InterpretedFunction)
    assert vllm.triton_utils.HAS_TRITON is False and vllm.triton_utils.triton.__class__.__name__ == "TritonPlaceholder"
    assert not isinstance(fused_recurrent.fused_recurrent_gated_delta_rule_fwd_kernel, InterpretedFunction)
    kernel = sys.modules[f"{copy.__name__}.fused_recurrent"].fused_recurrent_gated_delta_rule_fwd_kernel
    while not isinstance(kernel, InterpretedFunction | JITFunction):
        kernel = kernel.fn  # through the heuristics wrapper
    assert isinstance(kernel, InterpretedFunction)
    assert isinstance(tl.sum, JITFunction) and InterpreterBuilder.create_masked_load is load
    assert not triton.knobs.runtime.interpret


@pytest.mark.slow
def test_bf16_is_computed_on_bit_patterns_so_the_backend_passes_float16():
    """Triton 3.9's interpreter keeps bf16 as uint16 and multiplies the bit patterns: the chunked kernel's
    bf16 result is garbage, its float16 result is the function."""
    import torch.nn.functional as F

    fla = interpreted().module("fla")
    gen = torch.Generator().manual_seed(0)
    steps, heads, size = 16, 1, 16
    q, k, v = (torch.randn(1, steps, heads, size, generator=gen) for _ in range(3))
    g, beta = -torch.rand(1, steps, heads, generator=gen), torch.rand(1, steps, heads, generator=gen)
    state = torch.zeros(heads, size, size, dtype=torch.float64)  # [H, K, V]
    kn = F.normalize(k.double(), dim=-1, eps=1e-6)  # the final state does not depend on q
    for t in range(steps):
        state = state * g[0, t].double().exp()[:, None, None]
        delta = (v[0, t].double() - torch.einsum("hk,hkv->hv", kn[0, t], state)) * beta[0, t].double()[:, None]
        state = state + kn[0, t][:, :, None] * delta[:, None, :]
    errors = {}
    for dtype in (torch.float16, torch.bfloat16):
        with interpreted().running():
            _, final = fla.chunk_gated_delta_rule(
                q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype), initial_state=torch.zeros(1, heads, size, size),
                output_final_state=True, cu_seqlens=torch.tensor([0, steps]), use_qk_l2norm_in_kernel=True)
        want = state.transpose(-1, -2)  # vLLM's copy keeps [V, K]
        errors[dtype] = float((final[0].double() - want).abs().max() / want.abs().max())
    assert errors[torch.float16] < 1e-2
    assert not errors[torch.bfloat16] < 1.0  # wrong by more than the state's size, or NaN
