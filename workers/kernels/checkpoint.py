"""Internal prefill checkpoints on the kernel tier: Mamba2's export kernel, run by Triton's interpreter.

A Mamba spec with prefill checkpoint blocks (a scenario's ``prefill_checkpoint_alignment``) has the
backend write, besides a prefill chunk's final state into its running column, the state after the
chunk's first ``offset`` tokens into a checkpoint column (the sim tier records where:
``Chunk.checkpoint_tokens`` and ``Chunk.checkpoint_block``). Mamba2 does it in ``mamba_mixer2.py``
with ``store_prefill_checkpoint`` (``ops/ssd_checkpoint.py``): for each prefill row with a
checkpoint, the conv state is the ``state_len`` pre-conv inputs that end at the checkpoint, read
out of the batch's activations ``x``, and the SSM state is the scan's state at that chunk end.

:func:`export_checkpoints` calls that function, vLLM's own Triton kernel, under the interpreter
(``workers.triton_interpret``), with the launch arguments Mamba2 passes: the metadata
``MambaPrefillCheckpointMetadata`` (offset 0 for rows without a checkpoint, which write nothing),
``x`` as ``(dim, tokens)``, the prefill ``query_start_loc``, and the chunk states. The scan here is
the GDN kernel run up to each checkpoint, so the states are GDN's; what the kernel decides, which
tokens form the window and which state lands in which row, is Mamba2's.
"""

from __future__ import annotations

import torch

from workers.triton_interpret import interpreted


def export_checkpoints(x: torch.Tensor, query_start_loc: list[int], offsets: list[int], chunk_states: torch.Tensor,
                       state_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's checkpoint as ``store_prefill_checkpoint`` writes it into a paged pool of one block per row.

    ``x``: pre-conv activations ``[tokens, dim]`` of the whole prefill batch; ``offsets[r]``: the
    checkpoint's offset into row r's query (0: none); ``chunk_states[r]``: row r's SSM state at its
    checkpoint. Returns the pool's conv ``[rows, dim, state_len]`` and SSM ``[rows, ...]`` states;
    a row without a checkpoint stays zero.
    """
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
