"""vLLM's own model-runner code, called by the sim tier on stand-in states instead of re-implemented.

:class:`StandinSlots` (the Mamba cache as ``State`` ids, moved by vLLM's copy specs and CPU ``batch_memcpy``),
:class:`Preprocess` (``preprocess_mamba``), :class:`Checkpoints` (``MambaPrefillCheckpointBuilder.build``); only
:func:`worker_config` is mirrored. Invariant: each decision is the installed vLLM's own code's; a stand-in lacking
what vLLM starts to read raises (AttributeError), never guesses."""

from __future__ import annotations

import copy
import functools
import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from workers.sim.symbolic import ZERO, State

BATCH_MEMCPY_KERNEL = "vllm.v1.worker.mamba_utils.batch_memcpy_kernel"


@functools.cache
def _cpu_batch_memcpy() -> None:
    """Once per process: vLLM's ``batch_memcpy`` runs its CPU implementation (the sim's stand-ins are CPU tensors)."""
    from vllm.triton_utils.dispatcher import register_kernels
    from vllm.utils.cpu_triton_utils import _batch_memcpy_impl

    with warnings.catch_warnings():  # the dispatcher's scan of every module touches deprecated attributes
        warnings.simplefilter("ignore")
        register_kernels({BATCH_MEMCPY_KERNEL: _batch_memcpy_impl})


def gdn_copy_funcs() -> tuple[Any, ...]:
    """The GDN layer's state copy functions, as ``Qwen3NextForCausalLM.get_mamba_state_copy_func`` gives them."""
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateCopyFuncCalculator

    return tuple(MambaStateCopyFuncCalculator.gated_delta_net_state_copy_func())


class StandinSlots:
    """The Mamba cache's physical slots: ``self[block]`` is the ``State`` the slot holds (``ZERO`` when fresh), read
    from the temporal stand-in (a conv stand-in carries no window)."""

    def __init__(self, num_blocks: int, copy_funcs: Sequence[Any]):
        from vllm.model_executor.layers.mamba.mamba_utils import get_temporal_copy_spec

        if get_temporal_copy_spec not in copy_funcs:
            raise LookupError("vLLM's GDN copy functions no longer include get_temporal_copy_spec: the sim's "
                              "stand-in slots need re-checking against workers/sim/runner_calls.py")
        self.tensors = [torch.zeros((num_blocks, 1), dtype=torch.int64) for _ in copy_funcs]
        self._views = [t.numpy() for t in self.tensors]  # the same memory, read and written without torch's overhead
        temporal = list(copy_funcs).index(get_temporal_copy_spec)
        self.temporal, self._ids = self.tensors[temporal], self._views[temporal]
        self._states: list[State] = [ZERO]

    def __getitem__(self, block: int) -> State:
        return self._states[self._ids[block, 0]]

    def write(self, block: int, state: State) -> None:
        self._states.append(state)
        for view in self._views:
            view[block, 0] = len(self._states) - 1

    def copy(self, src: int, dst: int) -> None:
        for view in self._views:
            view[dst, 0] = view[src, 0]

    def zero(self, block: int) -> None:
        for view in self._views:
            view[block, 0] = 0


@dataclass
class RequestState:
    """What ``preprocess_mamba`` reads of the runner's ``CachedRequestState``."""

    num_computed_tokens: int
    block_ids: dict[int, list[int]]  # KV-cache group -> the request's block table


@dataclass
class InputBatch:
    """What ``preprocess_mamba`` reads and writes of the runner's ``InputBatch``: row request ids and accepted-token
    counts (reset to 1 where a running state moved)."""

    req_ids: list[str]
    num_accepted_tokens_cpu: np.ndarray


@dataclass
class Layer:
    kv_cache: list[torch.Tensor]


@dataclass
class Preprocess:
    """``preprocess_mamba`` with the runner's persistent ``mamba_state_idx`` and copy buffers."""

    vllm_config: Any
    kv_cache_config: Any
    slots: StandinSlots
    copy_funcs: tuple[Any, ...]
    mamba_state_idx: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from vllm.v1.utils import CpuGpuBuffer
        from vllm.v1.worker import mamba_utils

        _cpu_batch_memcpy()

        def make_buffer(*size: int, dtype: torch.dtype, numpy: bool = True) -> Any:
            return CpuGpuBuffer(*size, dtype=dtype, device=torch.device("cpu"), pin_memory=False, with_numpy=numpy)

        groups = mamba_utils.get_mamba_groups(self.kv_cache_config)
        self.funcs_by_type = {spec.mamba_type: self.copy_funcs for spec in groups}
        self.copy_bufs = mamba_utils.MambaCopyBuffers.create(
            self.vllm_config.scheduler_config.max_num_seqs, self.kv_cache_config, self.funcs_by_type, make_buffer)
        temporal = self.slots.temporal
        self._temporal_bytes = (temporal.data_ptr(), temporal.stride(0) * temporal.element_size(), temporal.shape[0])
        self.forward_context = {name: Layer(self.slots.tensors)
                                for gid in self.copy_bufs.mamba_group_ids
                                for name in self.kv_cache_config.kv_cache_groups[gid].layer_names}

    def __call__(self, scheduler_output: Any, requests: dict[str, RequestState], batch: InputBatch) -> None:
        """Run it for this batch: updates ``mamba_state_idx`` and accepted counts; its copies go to the stand-ins."""
        from vllm.v1.worker.mamba_utils import preprocess_mamba

        preprocess_mamba(scheduler_output, self.kv_cache_config, self.vllm_config.cache_config,
                         self.mamba_state_idx, batch, requests, self.forward_context, self.funcs_by_type,
                         self.copy_bufs)

    def copies(self) -> list[list[int]]:
        """The ``[src, dst]`` blocks of the last call's copies, off vLLM's copy buffers (one per request whose running
        state moved, in batch order)."""
        bufs, n = self.copy_bufs, self.copy_bufs.offset
        if n == 0:
            return []
        base, stride, rows = self._temporal_bytes
        end = base + stride * rows
        return [[(src - base) // stride, (dst - base) // stride]
                for src, dst in zip(bufs.src_ptrs.np[:n].tolist(), bufs.dst_ptrs.np[:n].tolist(), strict=True)
                if base <= dst < end]


def worker_config(vllm_config: Any, kv_cache_config: Any) -> Any:
    """The worker's ``vllm_config``: ``Worker.initialize_from_config``'s prefix-cache granularity (mirrored)."""
    config = copy.copy(vllm_config)
    config.cache_config = copy.copy(vllm_config.cache_config)
    config.cache_config.hash_block_size = kv_cache_config.hash_block_size
    config.cache_config.cache_hit_alignment_tokens = kv_cache_config.cache_hit_alignment_tokens
    return config


class AttentionMetadata:
    """What ``MambaPrefillCheckpointBuilder.build`` reads of ``CommonAttentionMetadata`` for the rows given (query
    starts, sequence lengths, the Mamba block table), built only when read."""

    def __init__(self, query_lens: list[int], seq_lens: list[int], block_tables: list[list[int]]):
        self._query_lens, self._seq_lens, self._tables = query_lens, seq_lens, block_tables

    @functools.cached_property
    def query_start_loc_cpu(self) -> torch.Tensor:
        return torch.tensor([0, *itertools.accumulate(self._query_lens)], dtype=torch.int32)

    @property
    def query_start_loc(self) -> torch.Tensor:
        return self.query_start_loc_cpu

    @functools.cached_property
    def seq_lens_cpu_upper_bound(self) -> torch.Tensor:
        return torch.tensor(self._seq_lens, dtype=torch.int32)

    @functools.cached_property
    def block_table_tensor(self) -> torch.Tensor:
        table = np.zeros((len(self._tables), max(map(len, self._tables), default=0)), dtype=np.int32)
        for row, blocks in zip(table, self._tables, strict=True):
            row[:len(blocks)] = blocks
        return torch.from_numpy(table)


class Checkpoints:
    """``MambaPrefillCheckpointBuilder.build``: per row, the offset into its chunk of the internal prefill
    checkpoint the backend exports, and the block it goes to (None where there is none)."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any, mamba_group: int):
        from vllm.model_executor.layers.mamba.checkpoint import MambaPrefillCheckpointBuilder

        spec = kv_cache_config.kv_cache_groups[mamba_group].kv_cache_spec
        self.builder = MambaPrefillCheckpointBuilder(worker_config(vllm_config, kv_cache_config), spec)

    def __call__(self, metadata: AttentionMetadata, rows: list[int]) -> list[tuple[int, int] | None]:
        built = self.builder.build(metadata, rows)
        if built is None:
            return [None] * len(rows)
        assert built.offsets is not None
        blocks = built.state_indices.tolist()
        return [(offset, block) if offset > 0 else None for offset, block in zip(built.offsets, blocks, strict=True)]
