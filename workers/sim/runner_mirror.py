"""vLLM's model runner for Mamba "align" mode over exact symbolic states: its own code where it can be
called, a mirror where it cannot.

Called, on stand-in states (``workers.sim.runner_calls``), so a new vLLM is followed without a change:
- ``vllm/v1/worker/mamba_utils.py``: ``preprocess_mamba`` with its ``cleanup_mamba_state_idx``, its copy specs
  (``get_temporal_copy_spec``, ``get_conv_copy_spec``) and ``batch_memcpy``.
- ``vllm/model_executor/layers/mamba/checkpoint.py``: ``MambaPrefillCheckpointBuilder.build``.

Mirrored (checked against vLLM 0.32.0 and 0.33.0; ``workers.sim.fidelity`` fingerprints each):
- ``gpu_worker.py``: ``Worker.initialize_from_config`` (the cache config adopts the core's hash block size).
- ``mamba_utils.py``: ``postprocess_mamba_fused_kernel`` (the boundary state accepted tokens crossed is copied).
- ``gpu_model_runner.py``: ``_update_states`` (zero fresh blocks, then the manager's block copies) and
  ``_update_states_after_model_execute`` (a row's accepted count is its valid sampled tokens).
- The GDN kernels' slot use: a prefill chunk reads and writes its running column; a verify step of ``1 + d``
  tokens starts from column ``curr + accepted - 1`` and writes its i-th token's state to ``curr + i``.
- ``store_prefill_checkpoint`` (``ops/ssd_checkpoint.py``): the state after ``query_start + offset`` tokens.
- A KV connector's synchronous load: the state at ``num_computed_tokens`` into column ``(num_computed - 1) // B``.

Invariant kept: ``slot(block_id)`` is exactly what vLLM's physical Mamba slot would hold, as a
:class:`~workers.sim.symbolic.State`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuzz.model.result import Chunk
from workers.sim.runner_calls import (
    AttentionMetadata,
    Checkpoints,
    InputBatch,
    Preprocess,
    RequestState,
    StandinSlots,
    gdn_copy_funcs,
)
from workers.sim.symbolic import ZERO, State, next_token


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class RequestSlots:
    """The runner's view of one request: its Mamba block table and running column."""

    block_ids: list[int]
    num_computed: int
    num_accepted: int = 1  # vLLM's input_batch.num_accepted_tokens_cpu entry


@dataclass
class StepWork:
    """One request's work in a step, as the runner receives it."""

    request_id: str
    tokens: list[int]  # the tokens processed: known tokens then draft tokens
    num_drafts: int
    samples: bool  # does this chunk reach the end of the known tokens


@dataclass
class StepOutcome:
    sampled: dict[str, list[int]] = field(default_factory=dict)
    # the running state after the accepted tokens, for drafting the next step
    running: dict[str, State] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)
    copies: list[list[int]] = field(default_factory=list)


class RunnerMirror:
    """Slots and per-request block tables; one ``step`` per scheduler step that schedules tokens."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any, mamba_group: int, num_blocks: int):
        spec = kv_cache_config.kv_cache_groups[mamba_group].kv_cache_spec
        self.group = mamba_group
        self.block_size = spec.block_size
        self.num_spec = spec.num_speculative_blocks
        funcs = gdn_copy_funcs()
        self.slots = StandinSlots(num_blocks, funcs)
        self.preprocess = Preprocess(vllm_config, kv_cache_config, self.slots, funcs)
        self.checkpoints = Checkpoints(vllm_config, kv_cache_config, mamba_group)
        self.writers: dict[int, str] = {}  # block id -> the request that last wrote its slot
        self.requests: dict[str, RequestSlots] = {}

    def slot(self, block_id: int) -> State:
        return self.slots[block_id]

    # ------------------------------------------------------------ batch updates

    def add(self, request_id: str, block_ids: list[int], num_computed: int) -> None:
        """A new or resumed request (its block table replaces any earlier one)."""
        self.requests[request_id] = RequestSlots(list(block_ids), num_computed)

    def extend(self, request_id: str, new_block_ids: list[int] | None, num_computed: int) -> None:
        req = self.requests[request_id]
        if new_block_ids:
            req.block_ids.extend(new_block_ids)
        req.num_computed = num_computed

    def zero_and_copy(self, zero_blocks: list[int], copies: list[tuple[int, int]]) -> list[list[int]]:
        """GPUModelRunner._update_states: zero fresh blocks, then apply the manager's block copies."""
        for block in zero_blocks:
            self.slots.zero(block)
        done = []
        for src, dst in copies:
            self.slots.copy(src, dst)
            done.append([src, dst])
        return done

    def load_external(self, request_id: str, prefix: tuple[int, ...]) -> int:
        """A connector load: the exact state after ``prefix`` into its resume column; returns the block written."""
        req = self.requests[request_id]
        block = req.block_ids[(len(prefix) - 1) // self.block_size]
        self.slots.write(block, State(prefix))
        self.writers[block] = request_id
        return block

    def drop(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def resume_state(self, request_id: str) -> State:
        """The state a request with a cache hit starts from (column of its last hit token)."""
        req = self.requests[request_id]
        return self.slot(req.block_ids[(req.num_computed - 1) // self.block_size])

    # ------------------------------------------------------------ one step

    def step(self, work: list[StepWork], scheduler_output: Any,
             copies_done: list[list[int]] | None = None) -> StepOutcome:
        """The runner's part of a step: vLLM's ``preprocess_mamba`` moves running states to their current column, then
        the kernels, sampling and the spec-decode postprocess."""
        out = StepOutcome(copies=list(copies_done or []))
        batch = InputBatch([item.request_id for item in work],
                           np.array([self.requests[item.request_id].num_accepted for item in work], dtype=np.int32))
        self.preprocess(scheduler_output,
                        {rid: RequestState(self.requests[rid].num_computed, {self.group: self.requests[rid].block_ids})
                         for rid in batch.req_ids}, batch)
        columns = {item.request_id: self.preprocess.mamba_state_idx[item.request_id] for item in work}
        owners = {self.requests[rid].block_ids[curr]: rid for rid, curr in columns.items()}
        for src, dst in self.preprocess.copies():
            self.writers[dst] = owners[dst]
            out.copies.append([src, dst])
        for i, item in enumerate(work):
            self.requests[item.request_id].num_accepted = int(batch.num_accepted_tokens_cpu[i])
        exports = self._checkpoints(work)
        for item, export in zip(work, exports, strict=True):
            self._run_chunk(item, columns[item.request_id], export, out)
        return out

    def _checkpoints(self, work: list[StepWork]) -> list[tuple[int, int] | None]:
        """Per chunk, the internal prefill checkpoint the backend exports (offset into the chunk, block), as vLLM's
        builder decides it for the rows without drafts."""
        reqs = [self.requests[item.request_id] for item in work]
        metadata = AttentionMetadata([len(item.tokens) for item in work],
                                     [req.num_computed + len(item.tokens) for req, item in zip(reqs, work, strict=True)],
                                     [req.block_ids for req in reqs])
        rows = [i for i, item in enumerate(work) if item.num_drafts == 0]
        exports: list[tuple[int, int] | None] = [None] * len(work)
        for row, export in zip(rows, self.checkpoints(metadata, rows), strict=True):
            exports[row] = export
        return exports

    def _run_chunk(self, item: StepWork, curr: int, export: tuple[int, int] | None, out: StepOutcome) -> None:
        req = self.requests[item.request_id]
        start = req.num_computed
        read_column = curr + req.num_accepted - 1
        read_block = req.block_ids[read_column] if start > 0 else None
        initial = self.slot(read_block) if read_block is not None else ZERO
        chunk = Chunk(
            request_id=item.request_id,
            start=start,
            num_tokens=len(item.tokens),
            num_draft_tokens=item.num_drafts,
            state_column=curr,
            read_block=read_block,
            initial_state_tokens=len(initial),
        )
        if item.num_drafts == 0:
            # ``_update_states_after_model_execute`` counts every row's valid sampled tokens: one here,
            # so the next step reads this chunk's column (curr + 1 - 1), not a verify step's offset.
            req.num_accepted = 1
            if export is not None:
                self._export_checkpoint(item, req, initial, chunk, *export)
            final = initial.extend(item.tokens)
            target = req.block_ids[curr]
            self.slots.write(target, final)
            self.writers[target] = item.request_id
            chunk.write_blocks = [target]
            if item.samples:
                out.sampled[item.request_id] = [next_token(final)]
                out.running[item.request_id] = final
            else:
                out.sampled[item.request_id] = []
        else:
            self._verify(item, req, curr, initial, chunk, out)
        out.chunks.append(chunk)

    def _export_checkpoint(self, item: StepWork, req: RequestSlots, initial: State, chunk: Chunk, offset: int,
                           target: int) -> None:
        """The state after ``offset`` chunk tokens into the builder's block; the chunk records position and block."""
        self.slots.write(target, initial.extend(item.tokens[:offset]))
        self.writers[target] = item.request_id
        chunk.checkpoint_tokens, chunk.checkpoint_block = req.num_computed + offset, target

    def _verify(self, item: StepWork, req: RequestSlots, curr: int, initial: State, chunk: Chunk,
                out: StepOutcome) -> None:
        """A spec-decode verify step: 1 + d tokens, one kept state per position."""
        states: list[State] = []
        state = initial
        for i, token in enumerate(item.tokens):
            state = state.extend((token,))
            states.append(state)
            block = req.block_ids[curr + i]
            self.slots.write(block, state)
            self.writers[block] = item.request_id
            chunk.write_blocks.append(block)
        targets = [next_token(s) for s in states]
        drafts = item.tokens[len(item.tokens) - item.num_drafts :]
        accepted = 0
        while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
            accepted += 1
        out.sampled[item.request_id] = targets[: accepted + 1]
        out.running[item.request_id] = states[accepted]
        req.num_accepted = accepted + 1
        self._postprocess_spec(item.request_id, req, curr, len(item.tokens), item.num_drafts, out)

    def _postprocess_spec(self, request_id: str, req: RequestSlots, curr: int, num_scheduled: int,
                          num_drafts: int, out: StepOutcome) -> None:
        """postprocess_mamba_fused_kernel: copy the exact boundary state accepted tokens crossed."""
        running_tokens = req.num_computed + num_scheduled - num_drafts
        new_computed = running_tokens + req.num_accepted - 1
        aligned = new_computed // self.block_size * self.block_size
        if aligned < running_tokens:
            return
        bias = aligned - running_tokens
        dest = aligned // self.block_size - 1
        if curr == dest:
            req.num_accepted = 1
            if bias == 0:
                return
        src_block = req.block_ids[curr + bias]
        dst_block = req.block_ids[dest]
        self.slots.copy(src_block, dst_block)
        self.writers[dst_block] = request_id
        out.copies.append([src_block, dst_block])
