"""A mirror of vLLM's model runner for Mamba "align" mode, over exact symbolic states.

Mirrored from vLLM 0.32.0 (checked against these functions; re-check on upgrade):
- ``vllm/v1/worker/mamba_utils.py``: ``preprocess_mamba`` (the running state lives
  in column ``cdiv(num_computed + num_scheduled, B) - 1``; when that column moves,
  the state is copied from ``block_ids[prev + accepted - 1]`` into it and the
  accepted count resets to 1), ``cleanup_mamba_state_idx``, and
  ``postprocess_mamba_fused_kernel`` (spec decode: when accepted tokens cross a
  block boundary, the exact boundary state is copied from its speculative
  column into the boundary's column).
- ``vllm/model_executor/layers/mamba/mamba_utils.py``: ``get_temporal_copy_spec``
  (the source column of a copy is ``cur_block_idx + num_accepted_tokens - 1``).
- ``vllm/v1/worker/gpu_model_runner.py``: ``_update_states`` (fresh blocks in
  ``new_block_ids_to_zero`` are zeroed and the manager's ``kv_cache_block_copies``,
  e.g. the copy-on-write of a partial-hit block, run before anything else; block
  tables are append-only except for requests resumed from preemption), and
  ``_update_states_after_model_execute`` (every row's accepted count is its number of valid
  sampled tokens: 1 for a chunk without drafts).
- The GDN kernels' slot use: a prefill chunk starts from the state in its
  running column (zero state when nothing is computed) and writes the state
  after its last token there; a verify step of ``1 + d`` tokens starts from
  column ``curr + accepted - 1`` and writes the state after its i-th token to
  column ``curr + i``.
- ``vllm/model_executor/layers/mamba/checkpoint.py``: ``MambaPrefillCheckpointBuilder.build``
  and the backend's export (``store_prefill_checkpoint`` in ``mamba_mixer2.py``): for a spec
  with prefill checkpoint blocks, each prefill chunk's checkpoint offset and column come from
  vLLM's own ``compute_mamba_prefill_checkpoints`` (called here, not re-derived, so the mirror
  declines in lockstep with the scheduler and ``MambaManager`` as the backend does), and the
  state after ``query_start + offset`` tokens is written into that column, before the running
  column gets the state after the whole chunk.
- A KV connector's synchronous load (``start_load_kv`` before the forward pass, after
  ``_update_states`` zeroed fresh blocks): the Mamba state at the request's
  ``num_computed_tokens`` (local hit plus external tokens) lands in the column the runner
  resumes from, ``(num_computed - 1) // B``.

Invariant kept: ``slots[block_id]`` is exactly what vLLM's physical Mamba slot
would hold, as a :class:`~workers.sim.symbolic.State`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from fuzz.model.result import Chunk
from workers.sim.symbolic import ZERO, State, next_token


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class RequestSlots:
    """The runner's view of one request: its Mamba block table and running column."""

    block_ids: list[int]
    num_computed: int
    state_idx: int | None = None  # vLLM's mamba_state_idx entry
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


class PrefillCheckpoints(NamedTuple):
    """What ``compute_mamba_prefill_checkpoints`` is called with besides the chunk (from the
    scheduler's cache config); ``alignment`` None means the spec declares no checkpoint blocks."""

    alignment: int | None
    hash_block_size: int
    cache_hit_alignment_tokens: int
    drop_eagle_block: bool


class RunnerMirror:
    """Slots and per-request columns; one ``step`` per scheduler step."""

    def __init__(self, mamba_block_size: int, num_speculative_blocks: int,
                 checkpoints: PrefillCheckpoints | None = None):
        self.block_size = mamba_block_size
        self.num_spec = num_speculative_blocks
        self.checkpoints = checkpoints if checkpoints and checkpoints.alignment is not None else None
        self.slots: dict[int, State] = {}
        self.writers: dict[int, str] = {}  # block id -> the request that last wrote its slot
        self.requests: dict[str, RequestSlots] = {}

    def slot(self, block_id: int) -> State:
        return self.slots.get(block_id, ZERO)

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
            self.slots.pop(block, None)
        done = []
        for src, dst in copies:
            self.slots[dst] = self.slot(src)
            done.append([src, dst])
        return done

    def forget(self, request_ids: set[str] | list[str]) -> None:
        """cleanup_mamba_state_idx: finished / preempted / resumed requests lose their column."""
        for rid in request_ids:
            req = self.requests.get(rid)
            if req is not None:
                req.state_idx = None

    def load_external(self, request_id: str, prefix: tuple[int, ...]) -> int:
        """A connector load: the exact state after ``prefix`` (the request's computed tokens) into
        its resume column; returns the block written."""
        req = self.requests[request_id]
        block = req.block_ids[(len(prefix) - 1) // self.block_size]
        self.slots[block] = State(prefix)
        self.writers[block] = request_id
        return block

    def drop(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def resume_state(self, request_id: str) -> State:
        """The state a request with a cache hit starts from (column of its last hit token)."""
        req = self.requests[request_id]
        return self.slot(req.block_ids[(req.num_computed - 1) // self.block_size])

    # ------------------------------------------------------------ one step

    def step(self, work: list[StepWork], copies_done: list[list[int]] | None = None) -> StepOutcome:
        out = StepOutcome(copies=list(copies_done or []))
        columns: dict[str, int] = {}
        # preprocess_mamba: move every running state to its current column first.
        for item in work:
            req = self.requests[item.request_id]
            prev = req.state_idx if req.state_idx is not None else (req.num_computed - 1) // self.block_size
            curr = cdiv(req.num_computed + len(item.tokens), self.block_size) - 1
            req.state_idx = curr
            columns[item.request_id] = curr
            if prev != -1 and prev != curr:
                src = req.block_ids[prev + req.num_accepted - 1]
                dst = req.block_ids[curr]
                self.slots[dst] = self.slot(src)
                self.writers[dst] = item.request_id
                out.copies.append([src, dst])
                req.num_accepted = 1
        # the kernels, then sampling and the spec-decode postprocess
        for item in work:
            self._run_chunk(item, columns[item.request_id], out)
        return out

    def _run_chunk(self, item: StepWork, curr: int, out: StepOutcome) -> None:
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
            self._export_checkpoint(item, req, initial, chunk)
            final = initial.extend(item.tokens)
            target = req.block_ids[curr]
            self.slots[target] = final
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

    def _export_checkpoint(self, item: StepWork, req: RequestSlots, initial: State, chunk: Chunk) -> None:
        """The backend's internal prefill checkpoint, where vLLM's rules say it writes one; the chunk
        records its position (tokens) and the block written (both stay None when it exports none)."""
        if self.checkpoints is None:
            return
        from vllm.model_executor.layers.mamba.checkpoint import compute_mamba_prefill_checkpoints

        c = self.checkpoints
        seq_len = req.num_computed + len(item.tokens)
        (offset,), (column,) = compute_mamba_prefill_checkpoints(
            [seq_len], [len(item.tokens)], hash_block_size=c.hash_block_size, mamba_block_size=self.block_size,
            checkpoint_alignment=c.alignment, drop_eagle_block=c.drop_eagle_block,
            cache_hit_alignment_tokens=c.cache_hit_alignment_tokens)
        if column < 0:
            return
        target = req.block_ids[column]
        self.slots[target] = initial.extend(item.tokens[:offset])
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
            self.slots[block] = state
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
        self.slots[dst_block] = self.slot(src_block)
        self.writers[dst_block] = request_id
        out.copies.append([src_block, dst_block])
