"""Which of vLLM's Triton kernels run under Triton's interpreter here, and what each workaround is for.

:func:`probe` calls each of :data:`ENTRY_POINTS` once on tiny inputs under a set of workarounds and reports the
kernels launched, or the failing kernel, error and construct; :func:`workaround_table` drops each in turn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from workers.triton_interpret import ALL, Interpreted, KernelFailure, Workaround, failure_of, interpreted

T, H, K = 20, 2, 16  # tokens, heads, head size: tiny, the interpreter is slow


def _gdn_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, T, H, K, generator=gen).to(dtype) for _ in range(3))
    g = -torch.rand(1, T, H, generator=gen)
    beta = torch.rand(1, T, H, generator=gen)
    return q, k, v, g, beta


def _chunked(runtime: Interpreted) -> None:
    """One sequence of T tokens from the zero state, as the kernel tier's prefill calls it."""
    q, k, v, g, beta = _gdn_inputs(torch.float16)
    runtime.module("fla").chunk_gated_delta_rule(
        q, k, v, g, beta.half(), initial_state=torch.zeros(1, H, K, K), output_final_state=True,
        cu_seqlens=torch.tensor([0, T]), use_qk_l2norm_in_kernel=True)


def _recurrent(runtime: Interpreted) -> None:
    """One sequence of T tokens, one state slot per token (slot 0 null), as the kernel tier's verify calls it."""
    q, k, v, g, beta = _gdn_inputs(torch.float16)
    runtime.module("fla").fused_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=torch.zeros(1 + T, H, K, K), inplace_final_state=True,
        cu_seqlens=torch.tensor([0, T]), ssm_state_indices=torch.arange(1, 1 + T, dtype=torch.int32)[None],
        use_qk_l2norm_in_kernel=True)


def _export(runtime: Interpreted) -> None:
    """Row 0's checkpoint at offset 16: the 3 inputs before it and its chunk state, into block 0."""
    from vllm.model_executor.layers.mamba.checkpoint import MambaPrefillCheckpointMetadata  # noqa: PLC0415

    x, chunk_states, conv, ssm = torch.randn(K, T), torch.randn(1, H, K, K), torch.zeros(1, K, 3), torch.zeros(1, H, K, K)
    meta = MambaPrefillCheckpointMetadata(torch.tensor([16], dtype=torch.int32), torch.tensor([0], dtype=torch.int32))
    runtime.module("ssd_checkpoint").store_prefill_checkpoint(
        meta, torch.tensor([0]), x, conv, chunk_states, ssm, torch.tensor([0, T], dtype=torch.int32), state_len=3)
    assert torch.equal(conv[0], x[:, 13:16]) and torch.equal(ssm[0], chunk_states[0])


def _copy_metadata(state: torch.Tensor, table: torch.Tensor) -> list[torch.Tensor | int]:
    """One temporal state tensor and one group's block table, as ``MambaSpecDecodeGPUContext`` lays them out."""
    i64 = torch.int64
    return [torch.tensor([table.data_ptr()], dtype=i64), table.stride(0), torch.tensor([state.data_ptr()], dtype=i64),
            torch.tensor([state.stride(0) * state.element_size()], dtype=i64),
            torch.tensor([state.element_size()], dtype=torch.int32), torch.tensor([state[0].numel()], dtype=i64),
            torch.tensor([0], dtype=torch.int32), torch.tensor([0], dtype=torch.int32),
            torch.tensor([0], dtype=torch.int32), torch.tensor([0], dtype=i64)]


def _precopy(runtime: Interpreted) -> None:
    """Request 0's running state moves from column 1 to column 2."""
    state, table = torch.randn(4, 8), torch.arange(4, dtype=torch.int32)[None]
    i32 = torch.int32
    runtime.module("mamba_utils").precopy_mamba_align_fused_kernel[(1, 1, 1)](
        torch.tensor([2], dtype=i32), torch.tensor([1], dtype=i32), torch.tensor([0], dtype=i32),
        *_copy_metadata(state, table), None, 1, COPY_BLOCK_SIZE=1024, CONV_STATE_DIM_FIRST=False,
        HAS_IDX_MAPPING=False, TEMPORAL_TILES=1)
    assert torch.equal(state[2], state[1])


def _postprocess(runtime: Interpreted) -> None:
    """A verify step of 3 tokens from 2 computed (block size 4) accepts 3: the state at 4 goes to column 0."""
    state, table = torch.randn(4, 8), torch.arange(4, dtype=torch.int32)[None]
    i32 = torch.int32
    accepted_out = torch.tensor([3], dtype=i32)
    runtime.module("mamba_utils").postprocess_mamba_fused_kernel[(1, 1, 1)](
        torch.tensor([3], dtype=i32), torch.tensor([0], dtype=i32), torch.tensor([3], dtype=i32),
        torch.tensor([2], dtype=i32), torch.tensor([2], dtype=i32), *_copy_metadata(state, table), accepted_out,
        None, 1, block_size=4, COPY_BLOCK_SIZE=1024, CONV_STATE_DIM_FIRST=False, TEMPORAL_TILES=1)
    assert torch.equal(state[0], state[1]) and accepted_out.tolist() == [1]


ENTRY_POINTS: dict[str, Callable[[Interpreted], None]] = {
    "chunk_gated_delta_rule": _chunked,
    "fused_recurrent_gated_delta_rule": _recurrent,
    "store_prefill_checkpoint": _export,
    "precopy_mamba_align_fused_kernel": _precopy,
    "postprocess_mamba_fused_kernel": _postprocess,
}


@dataclass
class ProbeResult:
    """One entry point under one set of workarounds: the kernels it launched, and its failure if any."""

    launched: list[str] = field(default_factory=list)
    failure: KernelFailure | None = None


def probe(workarounds: frozenset[Workaround] = ALL) -> dict[str, ProbeResult]:
    """Every entry point once under ``workarounds``."""
    runtime = interpreted(workarounds)
    results = {}
    for name, run in ENTRY_POINTS.items():
        result = results[name] = ProbeResult()
        with runtime.running() as launches:
            try:
                run(runtime)
            except Exception as exc:  # noqa: BLE001 - a kernel that cannot run is the result
                result.failure = failure_of(exc)
        result.launched = [launch.kernel for launch in launches if launch.error is None]
    return results


def workaround_table() -> dict[str, dict[str, ProbeResult]]:
    """``{"all": probe(ALL), "without <w>": probe(ALL - {w}) for each w}``."""
    table = {"all": probe(ALL)}
    for workaround in Workaround:
        table[f"without {workaround}"] = probe(ALL - {workaround})
    return table
