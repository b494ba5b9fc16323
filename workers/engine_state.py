"""Read, write and compare the real Mamba/GDN state held in one physical slot of a live engine.

A slot (a Mamba block id) holds, for every GDN layer, a conv state and an SSM state; vLLM keeps
them as ``layer.kv_cache = (conv, ssm)`` tensors whose first dimension is the block id. A
:data:`SlotState` is a detached copy of all of them, in layer order, so two engines (the
prefix-caching engine and the truth engine, with different block tables) can be compared and a
state taken in one can be written into the other (the canary).

Distance: the largest relative Frobenius error over the slot's tensors, computed in float32.
It is 0 for identical slots, about 1 for unrelated states, and bf16/chunking noise sits far below
(engine.STATE_TOLERANCE records the measured floor).
"""

from __future__ import annotations

from typing import Any

import torch

SlotState = list[torch.Tensor]


def _mamba_caches(engine: Any) -> list[torch.Tensor]:
    from vllm.model_executor.layers.mamba.abstract import MambaBase

    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    tensors: list[torch.Tensor] = []
    for _name, layer in sorted(runner.compilation_config.static_forward_context.items()):
        if isinstance(layer, MambaBase):
            tensors.extend(layer.kv_cache)
    if not tensors:
        raise RuntimeError("the engine's model has no Mamba/GDN layer with a state cache")
    return tensors


def read_slot(engine: Any, block_id: int) -> SlotState:
    """A float32 CPU copy of every state tensor in physical slot ``block_id``."""
    return [t[block_id].detach().to("cpu", torch.float32, copy=True) for t in _mamba_caches(engine)]


def write_slot(engine: Any, block_id: int, state: SlotState) -> None:
    """Overwrite physical slot ``block_id`` with ``state`` (the canary's fault injection)."""
    for target, value in zip(_mamba_caches(engine), state, strict=True):
        target[block_id].copy_(value.to(target.device, target.dtype))


def distance(a: SlotState, b: SlotState) -> float:
    """Largest relative Frobenius error ``|a - b| / |b|`` over the tensors of two slots."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        scale = float(torch.linalg.vector_norm(y)) or 1.0
        worst = max(worst, float(torch.linalg.vector_norm(x - y)) / scale)
    return worst
