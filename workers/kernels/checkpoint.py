"""Internal prefill checkpoints on the kernel tier: Mamba2's export kernel (``store_prefill_checkpoint``) run
by Triton's interpreter.

:func:`export_checkpoints` calls vLLM's own kernel with the launch arguments Mamba2 passes (a row without a
checkpoint has offset 0 and writes nothing). The states are GDN's; which tokens form the conv window and which
state lands in which row is Mamba2's."""

from __future__ import annotations

import torch

from workers.triton_interpret import interpreted


def export_checkpoints(x: torch.Tensor, query_start_loc: list[int], offsets: list[int], chunk_states: torch.Tensor,
                       state_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's checkpoint as ``store_prefill_checkpoint`` writes it into a pool of one block per row: ``x`` is
    ``[tokens, dim]`` pre-conv, ``offsets[r]`` row r's offset (0: none), ``chunk_states[r]`` its SSM state there.
    Returns the pool's conv ``[rows, dim, state_len]`` and SSM states; a row without a checkpoint stays zero."""
    from vllm.model_executor.layers.mamba.checkpoint import MambaPrefillCheckpointMetadata  # noqa: PLC0415

    runtime = interpreted()
    rows = len(offsets)
    meta = MambaPrefillCheckpointMetadata(torch.tensor(offsets, dtype=torch.int32),
                                          torch.arange(rows, dtype=torch.int32), offsets=list(offsets))
    conv = torch.zeros((rows, x.shape[1], state_len), dtype=x.dtype)
    ssm = torch.zeros((rows, *chunk_states.shape[1:]), dtype=chunk_states.dtype)
    with runtime.running():
        runtime.module("ssd_checkpoint").store_prefill_checkpoint(
            meta, torch.arange(rows), x.T, conv, chunk_states.contiguous(), ssm,
            torch.tensor(query_start_loc, dtype=torch.int32), state_len=state_len)
    return conv, ssm
