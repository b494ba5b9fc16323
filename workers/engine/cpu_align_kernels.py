"""CPU stand-ins for vLLM's fused align-mode Mamba copy kernels (``precopy_mamba_align_fused_kernel``,
``postprocess_mamba_fused_kernel``), which vLLM's CPU platform leaves to Triton, so MTP runs in the CPU engine.

:func:`register` installs them through ``vllm.triton_utils.dispatcher``. Each keeps its kernel's decision logic
line for line and does ``_copy_mamba_state_block``'s byte copies, running the grid's programs in order: safe, as
no program writes bytes another reads (an in-block conv shift moves bytes down, as ``memmove`` does)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

_U64 = 1 << 64


@dataclass(frozen=True)
class _StateLayout:
    """One (layer, state type) tensor as the fused kernels see it: raw addresses and byte sizes."""

    base: int
    block_stride: int
    elem_size: int
    inner_size: int
    conv_width: int  # 0 for a temporal (SSM) state
    group: int
    dim_rows: int  # DS conv layout: rows per block, 0 otherwise
    row_stride: int


def _layouts(base_addrs: torch.Tensor, block_strides: torch.Tensor, elem_sizes: torch.Tensor,
             inner_sizes: torch.Tensor, conv_widths: torch.Tensor, group_indices: torch.Tensor,
             dim_row_counts: torch.Tensor, dim_row_strides: torch.Tensor) -> list[_StateLayout]:
    columns = (base_addrs, block_strides, elem_sizes, inner_sizes, conv_widths, group_indices,
               dim_row_counts, dim_row_strides)
    return [_StateLayout(base % _U64, *rest) for base, *rest in zip(*(c.tolist() for c in columns), strict=True)]


class _BlockTables:
    """Reads the runner's persistent per-group int32 block tables through their stored addresses."""

    def __init__(self, table_addrs: torch.Tensor, stride_per_request: int) -> None:
        self._addrs = [a % _U64 for a in table_addrs.tolist()]
        self._stride = int(stride_per_request)

    def block(self, group: int, row: int, column: int) -> int:
        address = self._addrs[group] + 4 * (row * self._stride + column)
        return ctypes.c_int32.from_address(address).value


def _copy_state_block(layout: _StateLayout, tables: _BlockTables, row: int, src_col: int, dst_col: int,
                      token_bias: int, conv_dim_first: bool) -> None:
    """The bytes ``_copy_mamba_state_block`` moves for one request and one state tensor."""
    dst = layout.base + tables.block(layout.group, row, dst_col) * layout.block_stride
    if layout.conv_width == 0:
        src_block = tables.block(layout.group, row, src_col + token_bias)
        ctypes.memmove(dst, layout.base + src_block * layout.block_stride, layout.inner_size * layout.elem_size)
        return
    src = layout.base + tables.block(layout.group, row, src_col) * layout.block_stride
    kept_tokens = layout.conv_width - token_bias
    if conv_dim_first:
        # (dim, state_len) per block: shift every dim row left by token_bias elements.
        for r in range(layout.dim_rows):
            offset = r * layout.row_stride
            ctypes.memmove(dst + offset, src + offset + token_bias * layout.elem_size, kept_tokens * layout.elem_size)
        return
    token_bytes = layout.inner_size * layout.elem_size
    ctypes.memmove(dst, src + token_bias * token_bytes, kept_tokens * token_bytes)


def postprocess_mamba_fused(
    num_accepted_tokens_ptr: torch.Tensor, mamba_state_idx_ptr: torch.Tensor,
    num_scheduled_tokens_ptr: torch.Tensor | None, num_computed_tokens_ptr: torch.Tensor,
    num_draft_tokens_ptr: torch.Tensor | None, block_table_ptrs_ptr: torch.Tensor, block_table_stride_req: int,
    state_base_addrs_ptr: torch.Tensor, state_block_strides_ptr: torch.Tensor, state_elem_sizes_ptr: torch.Tensor,
    state_inner_sizes_ptr: torch.Tensor, state_conv_widths_ptr: torch.Tensor,
    state_group_indices_ptr: torch.Tensor, state_dim_row_count_ptr: torch.Tensor,
    state_dim_row_stride_ptr: torch.Tensor, num_accepted_tokens_out_ptr: torch.Tensor,
    idx_mapping_ptr: torch.Tensor | None, num_reqs: int, block_size: int, COPY_BLOCK_SIZE: int = 1024,
    CONV_STATE_DIM_FIRST: bool = False, HAS_IDX_MAPPING: bool = False, PRECOMPUTED_NEW_COMPUTED: bool = False,
    TEMPORAL_TILES: int = 1,
) -> None:
    """``postprocess_mamba_fused_kernel`` on CPU (parameter names and order as the kernel's)."""
    layouts = _layouts(state_base_addrs_ptr, state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr,
                       state_conv_widths_ptr, state_group_indices_ptr, state_dim_row_count_ptr,
                       state_dim_row_stride_ptr)
    tables = _BlockTables(block_table_ptrs_ptr, block_table_stride_req)
    accepted = num_accepted_tokens_ptr.tolist()  # read before any store, as every program of the grid does
    for batch_idx in range(num_reqs):
        req = int(idx_mapping_ptr[batch_idx]) if HAS_IDX_MAPPING else batch_idx
        if req < 0:
            continue
        num_accepted = accepted[req]
        src_col = int(mamba_state_idx_ptr[req])
        if PRECOMPUTED_NEW_COMPUTED:
            new_computed = int(num_computed_tokens_ptr[req])
            running_state_tokens = new_computed - num_accepted + 1
        else:
            running_state_tokens = (int(num_computed_tokens_ptr[req]) + int(num_scheduled_tokens_ptr[req])
                                    - int(num_draft_tokens_ptr[req]))
            new_computed = running_state_tokens + num_accepted - 1
        aligned = new_computed // block_size * block_size
        if aligned < running_state_tokens:
            continue
        token_bias = aligned - running_state_tokens
        dst_col = aligned // block_size - 1
        if src_col == dst_col:
            num_accepted_tokens_out_ptr[req] = 1
            if token_bias == 0:
                continue
        for layout in layouts:
            _copy_state_block(layout, tables, req, src_col, dst_col, token_bias, CONV_STATE_DIM_FIRST)


def precopy_mamba_align_fused(
    mamba_state_idx_ptr: torch.Tensor, src_col_ptr: torch.Tensor, token_bias_ptr: torch.Tensor,
    block_table_ptrs_ptr: torch.Tensor, block_table_stride_req: int, state_base_addrs_ptr: torch.Tensor,
    state_block_strides_ptr: torch.Tensor, state_elem_sizes_ptr: torch.Tensor, state_inner_sizes_ptr: torch.Tensor,
    state_conv_widths_ptr: torch.Tensor, state_group_indices_ptr: torch.Tensor,
    state_dim_row_count_ptr: torch.Tensor, state_dim_row_stride_ptr: torch.Tensor,
    idx_mapping_ptr: torch.Tensor | None, num_reqs: int, COPY_BLOCK_SIZE: int = 1024,
    CONV_STATE_DIM_FIRST: bool = False, HAS_IDX_MAPPING: bool = True, TEMPORAL_TILES: int = 1,
) -> None:
    """``precopy_mamba_align_fused_kernel`` on CPU (parameter names and order as the kernel's)."""
    layouts = _layouts(state_base_addrs_ptr, state_block_strides_ptr, state_elem_sizes_ptr, state_inner_sizes_ptr,
                       state_conv_widths_ptr, state_group_indices_ptr, state_dim_row_count_ptr,
                       state_dim_row_stride_ptr)
    tables = _BlockTables(block_table_ptrs_ptr, block_table_stride_req)
    for batch_idx in range(num_reqs):
        req = int(idx_mapping_ptr[batch_idx]) if HAS_IDX_MAPPING else batch_idx
        if req < 0:
            continue
        src_col, dst_col = int(src_col_ptr[req]), int(mamba_state_idx_ptr[req])
        if src_col < 0 or src_col == dst_col:
            continue
        token_bias = int(token_bias_ptr[req])
        for layout in layouts:
            _copy_state_block(layout, tables, req, src_col, dst_col, token_bias, CONV_STATE_DIM_FIRST)


KERNELS = {
    "vllm.v1.worker.mamba_utils.postprocess_mamba_fused_kernel": postprocess_mamba_fused,
    "vllm.v1.worker.mamba_utils.precopy_mamba_align_fused_kernel": precopy_mamba_align_fused,
}


_installed = False


def register() -> bool:
    """Install the stand-ins (once) when this process runs vLLM on CPU without Triton; True when installed."""
    global _installed
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON
    from vllm.triton_utils.dispatcher import register_kernels

    if not current_platform.is_cpu() or HAS_TRITON:
        return False
    if not _installed:
        register_kernels(KERNELS)
        _installed = True
    return True
