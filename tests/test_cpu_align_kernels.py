"""The CPU stand-ins for vLLM's fused align-mode copy kernels move exactly the bytes vLLM's own V1
copy specs (``get_conv_copy_spec`` / ``get_temporal_copy_spec``) move, on GDN-shaped states.

Each case builds random conv/SSM state tensors and block tables, runs a stand-in through vLLM's
``MambaSpecDecodeGPUContext`` (so the metadata is vLLM's own), and compares every byte of the
state tensors with vLLM's scalar path: ``collect_mamba_copy_meta`` + ``do_mamba_copy_block``.
The same cases also run vLLM's own Triton kernels under Triton's interpreter (``workers.triton_interpret``:
a private copy of ``vllm/v1/worker/mamba_utils.py`` whose context launches them with their real grid),
and every byte and accepted count must equal the stand-ins'.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from workers.engine import cpu_align_kernels

BLOCK = 4  # mamba block size
SPEC_BLOCKS = 2  # num_speculative_blocks = num_speculative_tokens
WIDTH = 4  # conv kernel width: conv state keeps WIDTH - 1 + SPEC_BLOCKS positions
NUM_BLOCKS = 64
MAX_REQS = 6
COLUMNS = 12
LAYERS = ("model.layers.0.linear_attn", "model.layers.2.linear_attn")


@pytest.fixture(scope="module")
def vllm_cpu():
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()  # vLLM's CPU batch_memcpy, for the scalar path
    assert cpu_align_kernels.register()


def _world(seed: int):
    """Two GDN layers' states, a KVCacheConfig naming them, and per-request block tables."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec

    gen = torch.Generator().manual_seed(seed)
    conv_shape, ssm_shape = (WIDTH - 1 + SPEC_BLOCKS, 24), (2, 8, 8)
    spec = MambaSpec(shapes=(conv_shape, ssm_shape), dtypes=(torch.bfloat16, torch.float32), block_size=BLOCK,
                     mamba_type=MambaAttentionBackendEnum.GDN_ATTN, mamba_cache_mode="align",
                     num_speculative_blocks=SPEC_BLOCKS)
    config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                           kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), spec)])
    layers = {name: SimpleNamespace(kv_cache=[torch.randn(NUM_BLOCKS, *conv_shape, generator=gen).to(torch.bfloat16),
                                              torch.randn(NUM_BLOCKS, *ssm_shape, generator=gen)])
              for name in LAYERS}
    rng = random.Random(seed)
    table = torch.zeros(MAX_REQS, COLUMNS, dtype=torch.int32)
    for row in range(MAX_REQS):
        table[row] = torch.tensor(rng.sample(range(1, NUM_BLOCKS), COLUMNS), dtype=torch.int32)
    funcs = {MambaAttentionBackendEnum.GDN_ATTN: MambaStateCopyFuncCalculator.gated_delta_net_state_copy_func()}
    return config, layers, table, funcs


def _context(config, layers, table, funcs):
    from vllm.v1.utils import CpuGpuBuffer
    from vllm.v1.worker.mamba_utils import MambaSpecDecodeGPUContext

    def make_buffer(*size, dtype):
        return CpuGpuBuffer(*size, dtype=dtype, device="cpu", pin_memory=False)

    ctx = MambaSpecDecodeGPUContext.create(MAX_REQS, config, funcs, torch.device("cpu"), make_buffer)
    ctx.initialize_from_forward_context(config, layers, funcs, [table])
    return ctx, make_buffer


def _scalar_copies(config, layers, table, funcs, make_buffer, copies):
    """vLLM's scalar align copy path for ``copies`` = [(row, src_col, dst_col, token_bias)]."""
    from vllm.v1.worker.mamba_utils import MambaCopyBuffers, collect_mamba_copy_meta, do_mamba_copy_block

    bufs = MambaCopyBuffers.create(MAX_REQS, config, funcs, make_buffer)
    for row, src, dst, bias in copies:
        state = SimpleNamespace(block_ids=[table[row].tolist()])
        collect_mamba_copy_meta(bufs, config, funcs, [0], src, dst, bias, state, layers)
    do_mamba_copy_block(bufs)


def _snapshot(layers):
    return [t.clone() for layer in layers.values() for t in layer.kv_cache]


def _restore(layers, snapshot):
    for i, layer in enumerate(layers.values()):
        layer.kv_cache = [t.clone() for t in snapshot[2 * i: 2 * i + 2]]


def _assert_same_bytes(a, b):
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8))


def _precopy_case(seed: int) -> tuple[list[int], list[int], list[int]]:
    """Per request: fresh (-1), same column (no copy) or a move by 1..3 columns with an accepted bias."""
    rng = random.Random(seed)
    src = [rng.choice((-1, 3, 4, 5)) for _ in range(MAX_REQS)]
    dst = [s if s < 0 or rng.random() < 0.25 else s + rng.randint(1, 3) for s in src]
    bias = [rng.randint(0, SPEC_BLOCKS) for _ in range(MAX_REQS)]
    return src, dst, bias


def _run_precopy(ctx, src, dst, bias) -> None:
    ctx.run_fused_precopy(MAX_REQS, torch.tensor(dst, dtype=torch.int32), torch.tensor(src, dtype=torch.int32),
                          torch.tensor(bias, dtype=torch.int32), idx_mapping=None)


@pytest.mark.parametrize("seed", range(8))
def test_precopy_moves_the_bytes_of_vllms_copy_specs(vllm_cpu, seed):
    num_reqs = MAX_REQS
    src, dst, bias = _precopy_case(seed)
    config, layers, table, funcs = _world(seed)
    ctx, make_buffer = _context(config, layers, table, funcs)
    before = _snapshot(layers)
    _run_precopy(ctx, src, dst, bias)
    fused = _snapshot(layers)
    _restore(layers, before)
    _scalar_copies(config, layers, table, funcs, make_buffer,
                   [(r, src[r], dst[r], bias[r]) for r in range(num_reqs) if src[r] >= 0 and src[r] != dst[r]])
    _assert_same_bytes(fused, _snapshot(layers))
    assert any(not torch.equal(a, b) for a, b in zip(before, fused, strict=True))


def _postprocess_case(seed: int) -> dict[str, list[int]]:
    """One verify step per request (1 + drafts tokens), its running state up to SPEC_BLOCKS tokens below a
    boundary, so that some accepted counts cross it and some do not; request 0 crosses."""
    rng, num_reqs = random.Random(seed), MAX_REQS
    running = [BLOCK * rng.randint(1, 4) - rng.randint(0, SPEC_BLOCKS) for _ in range(num_reqs)]
    computed = [r - 1 for r in running]
    drafts = [rng.choice((1, SPEC_BLOCKS, SPEC_BLOCKS)) for _ in range(num_reqs)]
    scheduled = [d + 1 for d in drafts]
    accepted = [rng.randint(1, d + 1) for d in drafts]
    running[0], computed[0], drafts[0], scheduled[0], accepted[0] = 2 * BLOCK - 1, 2 * BLOCK - 2, 2, 3, 3
    state_idx = [(r + BLOCK - 1) // BLOCK - 1 for r in running]  # the running column preprocess chose
    return {"running": running, "computed": computed, "drafts": drafts, "scheduled": scheduled,
            "accepted": accepted, "state_idx": state_idx}


def _run_postprocess(ctx, case: dict[str, list[int]]) -> list[int]:
    """The fused postprocess over ``case``; returns the accepted counts it leaves."""
    as_i32 = [torch.tensor(case[k], dtype=torch.int32)
              for k in ("accepted", "state_idx", "scheduled", "computed", "drafts")]
    ctx.run_fused_postprocess(MAX_REQS, *as_i32)
    return ctx.num_accepted_tokens_out[:MAX_REQS].tolist()


@pytest.mark.parametrize("seed", range(8))
def test_postprocess_saves_the_boundary_state_and_resets_accepted_counts(vllm_cpu, seed):
    num_reqs = MAX_REQS
    case = _postprocess_case(seed)
    running, accepted, state_idx = case["running"], case["accepted"], case["state_idx"]
    config, layers, table, funcs = _world(seed)
    ctx, make_buffer = _context(config, layers, table, funcs)
    before = _snapshot(layers)
    accepted_out = _run_postprocess(ctx, case)
    fused = _snapshot(layers)
    _restore(layers, before)
    # the kernel's contract: when the accepted tokens reach a block boundary at or past the running
    # state, the block ending there receives the state at that boundary
    copies, expected_accepted = [], list(accepted)
    for r in range(num_reqs):
        boundary = (running[r] + accepted[r] - 1) // BLOCK * BLOCK
        if boundary < running[r]:
            continue
        dst, bias = boundary // BLOCK - 1, boundary - running[r]
        if dst == state_idx[r]:
            expected_accepted[r] = 1
        if (dst, bias) != (state_idx[r], 0):
            copies.append((r, state_idx[r], dst, bias))
    assert copies, "the case should exercise at least one copy"
    _scalar_copies(config, layers, table, funcs, make_buffer, copies)
    _assert_same_bytes(fused, _snapshot(layers))
    assert accepted_out == expected_accepted


def test_not_installed_off_cpu_or_with_triton(monkeypatch):
    import vllm.triton_utils

    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", True)
    assert cpu_align_kernels.register() is False


@pytest.fixture(scope="module")
def interpreted_mamba_utils():
    """vLLM's ``mamba_utils`` as a private copy whose kernels Triton's interpreter runs, and its runtime."""
    from workers.triton_interpret import interpreted

    runtime = interpreted()
    return runtime, runtime.module("mamba_utils")


def _vllm_kernels_against_stand_ins(seed, interpreted_mamba_utils, run):
    """``run(ctx)`` with the stand-ins, then, from the same bytes, with vLLM's kernels under the interpreter:
    returns both snapshots and both results. The state tensors are restored in place: each context holds
    their addresses."""
    runtime, mamba_utils = interpreted_mamba_utils
    config, layers, table, funcs = _world(seed)
    ctx, make_buffer = _context(config, layers, table, funcs)
    kernel_ctx = mamba_utils.MambaSpecDecodeGPUContext.create(MAX_REQS, config, funcs, torch.device("cpu"),
                                                               make_buffer)
    kernel_ctx.initialize_from_forward_context(config, layers, funcs, [table])
    before = _snapshot(layers)
    stand_in = run(ctx)
    after_stand_ins = _snapshot(layers)
    for tensor, saved in zip([t for layer in layers.values() for t in layer.kv_cache], before, strict=True):
        tensor.copy_(saved)
    with runtime.running() as launches:
        kernel = run(kernel_ctx)
    assert launches and all(launch.error is None for launch in launches)
    return before, after_stand_ins, _snapshot(layers), stand_in, kernel, launches


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_vllms_precopy_kernel_under_the_interpreter_equals_the_stand_in(vllm_cpu, interpreted_mamba_utils, seed):
    src, dst, bias = _precopy_case(seed)
    before, stand_in, kernel, _, _, launches = _vllm_kernels_against_stand_ins(
        seed, interpreted_mamba_utils, lambda ctx: _run_precopy(ctx, src, dst, bias))
    assert {launch.kernel for launch in launches} == {"precopy_mamba_align_fused_kernel"}
    _assert_same_bytes(kernel, stand_in)
    assert any(not torch.equal(a, b) for a, b in zip(before, kernel, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_vllms_postprocess_kernel_under_the_interpreter_equals_the_stand_in(vllm_cpu, interpreted_mamba_utils, seed):
    case = _postprocess_case(seed)
    before, stand_in, kernel, stand_in_accepted, kernel_accepted, launches = _vllm_kernels_against_stand_ins(
        seed, interpreted_mamba_utils, lambda ctx: _run_postprocess(ctx, case))
    assert {launch.kernel for launch in launches} == {"postprocess_mamba_fused_kernel"}
    _assert_same_bytes(kernel, stand_in)
    assert kernel_accepted == stand_in_accepted
    assert any(not torch.equal(a, b) for a, b in zip(before, kernel, strict=True))
