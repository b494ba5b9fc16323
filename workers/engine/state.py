"""Read, write and compare the real Mamba/GDN state held in one physical slot (Mamba block id) of a live engine.

A :data:`SlotState` is a detached float32 copy, in layer order, of the (conv, ssm) state a resuming request
reads, comparable across engines and writable into another (the canary). Distance: the largest relative
Frobenius error (0 identical, about 1 unrelated; ``STATE_TOLERANCE`` is the noise floor)."""

from __future__ import annotations

from typing import Any

import torch

SlotState = list[torch.Tensor]


def _resumable_views(engine: Any) -> list[torch.Tensor]:
    """Every GDN layer's state tensors, cut to what a resuming request reads: the conv state's first ``width - 1``
    positions (spec decode allocates ``num_spec`` more), so spec-decode slots compare with the truth engine's."""
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
