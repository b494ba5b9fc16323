"""Read, write and compare the real Mamba/GDN state held in one physical slot of a live engine.

A slot (a Mamba block id) holds, for every GDN layer, a conv state and an SSM state; vLLM keeps
them as ``layer.kv_cache = (conv, ssm)`` tensors whose first dimension is the block id. A
:data:`SlotState` is a detached copy of the part of them a resuming request reads, in layer
order, so two engines (the prefix-caching engine and the truth engine, with different block
tables) can be compared and a state taken in one can be written into the other (the canary).

Distance: the largest relative Frobenius error over the slot's tensors, computed in float32.
It is 0 for identical slots, about 1 for unrelated states, and bf16/chunking noise sits far below
(engine.STATE_TOLERANCE records the measured floor).
"""

from __future__ import annotations

from typing import Any

import torch

SlotState = list[torch.Tensor]


def _resumable_views(engine: Any) -> list[torch.Tensor]:
    """Every GDN layer's state tensors, cut to what a request resuming from a slot reads.

    The conv state keeps ``width - 1`` positions; with spec decode vLLM allocates
    ``width - 1 + num_spec`` so drafts can roll back, and a prefill (every resume starts with one)
    reads and writes only the first ``width - 1`` of them (``_spec_aware_nonspec`` in vLLM's CPU
    GDN ops). Cutting there makes a spec-decode engine's slots comparable with the truth engine's.
    """
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    views: list[torch.Tensor] = []
    for _name, layer in sorted(runner.compilation_config.static_forward_context.items()):
        if not isinstance(layer, MambaBase):
            continue
        conv, *rest = layer.kv_cache
        kept = layer.conv1d.weight.size(-1) - 1
        views.append(conv[..., :kept] if is_conv_state_dim_first() else conv[:, :kept])
        views.extend(rest)
    if not views:
        raise RuntimeError("the engine's model has no Mamba/GDN layer with a state cache")
    return views


def read_slot(engine: Any, block_id: int) -> SlotState:
    """A float32 CPU copy of the resumable state in physical slot ``block_id``."""
    return [t[block_id].detach().to("cpu", torch.float32, copy=True) for t in _resumable_views(engine)]


def write_slot(engine: Any, block_id: int, state: SlotState) -> None:
    """Overwrite the resumable state of physical slot ``block_id`` (the canary's fault injection)."""
    for target, value in zip(_resumable_views(engine), state, strict=True):
        target[block_id].copy_(value.to(target.device, target.dtype))


def distance(a: SlotState, b: SlotState) -> float:
    """Largest relative Frobenius error ``|a - b| / |b|`` over the tensors of two slots."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        scale = float(torch.linalg.vector_norm(y)) or 1.0
        worst = max(worst, float(torch.linalg.vector_norm(x - y)) / scale)
    return worst
