# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Replay a request mix through vLLM's real Scheduler and KV-cache manager in Mamba
"align" mode, mirroring what the model runner writes into the Mamba state slots.

Invariant checked: a Mamba block the prefix cache hashes as the state after N tokens
holds exactly that state. States are exact (a slot holds the token ids its state has
consumed), so "the state after 364 tokens" and "the state after 1600" never look alike.
Each case also checks that every request computes what its own prompt gives, that
every request finishes, and, where the case records what vLLM's split paid, that the
split under test costs no more.

A case is plain data: the model's layers (`prefill_checkpoint_alignment`: None for
Gated DeltaNet, k for a Mamba2/KDA spec with an internal prefill checkpoint), the
`EngineArgs` and scheduler settings, the requests (arrival and abort steps, prompts
built from named shared segments, follow-ups continuing an earlier conversation,
tokens a KV connector holds, draft acceptance) and per-step token budgets (concurrent
requests sharing one step's budget give the same chunks).

The runner mirror follows `preprocess_mamba` / `postprocess_mamba` (the running state
moves to column `cdiv(num_computed + num_scheduled, B) - 1`; a verify step writes one
state per position; accepted tokens crossing a boundary copy the exact boundary
state), the manager's block copies and zeroed blocks, the backend's internal prefill
checkpoint (`compute_mamba_prefill_checkpoints`) and a KV connector's synchronous
load. The "model" is a hash of the state: a state a few tokens off gives different
tokens, as a real model's would. Draft tokens are what the target would sample, but
for those the case's acceptance pattern rejects.

Public vLLM APIs only: the scheduler, its KV-cache manager and the blocks each
request holds are read through their public attributes, and each step's token budget
is set through `Scheduler.max_num_scheduled_tokens`.
"""

import hashlib
import json
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.layers.mamba.checkpoint import (
    compute_mamba_prefill_checkpoints,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_cache_hit_alignment_tokens,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

Case = dict[str, Any]
State = tuple[int, ...]  # the token ids a state has consumed, in order

# ---------------------------------------------------------------- the model
MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": 32000,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    # 8 KB a token: a 32-token attention page holds the GDN state page (align mode)
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,  # the CPU GDN kernel rejects smaller
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "num_experts": 4,
    # all experts: top-2 routing flipped between chunkings of one prompt
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [1],
    "norm_topk_prob": True,
    # the MTP layer reads as layer 0, so it must be MoE (Qwen3NextMTP)
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    # with the slow GDN decay, a state a few tokens off moves logprobs past bf16 noise
    "initializer_range": 0.2,
    "max_position_embeddings": 16384,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
STATE_SHAPES: tuple[tuple[int, ...], ...] = ((3, 512), (2, 128, 128))
MAX_MODEL_LEN = 16384
# How the engine is started for every case (a case adds its engine args, a connector).
ENGINE_ARGS: dict[str, Any] = {
    "skip_tokenizer_init": True,
    "load_format": "dummy",
    "dtype": "bfloat16",
    "enforce_eager": True,
    "enable_prefix_caching": True,
    "mamba_cache_mode": "align",
    # the harness, like the sim, drives EngineCore.step's synchronous order
    "async_scheduling": False,
}
# ---------------------------------------------------------------- end of the model

ATTENTION_GROUP, MAMBA_GROUP = 0, 1
STALL_STEPS = 16  # steps with nothing scheduled while requests wait: they never finish
# What a case's request leaves out: it arrives at step 0, is never aborted, starts a new
# conversation, has no tokens a KV connector holds, and accepts every draft token.
REQUEST_DEFAULTS: dict[str, Any] = {
    "arrival_step": 0,
    "abort_step": None,
    "continues": None,
    "external_tokens": 0,
    "accept": [],
}


def requests_of(case: Case) -> dict[str, dict[str, Any]]:
    """The case's requests by id, with the defaults filled in."""
    return {r["id"]: {**REQUEST_DEFAULTS, **r} for r in case["requests"]}


def tokens_for(case: Case, key: str, length: int) -> State:
    """`length` token ids for a named prompt part (a shared segment is the same
    tokens in every prompt that uses it)."""
    words: list[int] = []
    for counter in range(-(-length // 16)):
        text = f"{case['seed']}/{key}/{counter}"
        words += array("I", hashlib.blake2b(text.encode(), digest_size=64).digest())
    vocab = MODEL_CONFIG["vocab_size"] - 1
    return tuple(w % vocab + 1 for w in words[:length])


def next_token(state: State) -> int:
    """The toy model: the greedy token after an exact state."""
    digest = hashlib.blake2b(array("I", state).tobytes(), digest_size=16).digest()
    return int.from_bytes(digest[:4], "little") % (MODEL_CONFIG["vocab_size"] - 1) + 1


def greedy(state: State, count: int) -> list[int]:
    out: list[int] = []
    for _ in range(count):
        out.append(next_token(state))
        state += (out[-1],)
    return out


def prompt_of(
    case: Case, spec: dict[str, Any], said: dict[str, list[int]]
) -> list[int]:
    """A request's prompt: its parent's conversation (for a follow-up), then its own
    parts."""
    head: list[int] = []
    if spec["continues"] is not None:
        parent = requests_of(case)[spec["continues"]]
        head = prompt_of(case, parent, said) + said[parent["id"]]
    own: list[int] = []
    for index, part in enumerate(spec["prompt"]):
        if isinstance(part, str):
            own += tokens_for(case, f"segment:{part}", case["segments"][part])
        else:
            own += tokens_for(case, f"tail:{spec['id']}:{index}", part)
    return head + own


# ---------------------------------------------------------------- the scheduler


def build_scheduler(case: Case, model_dir: Path) -> Scheduler:
    """vLLM's Scheduler as the engine builds it for the case: one full-attention group
    and one Mamba group in align mode, over the model's `config.json` (nothing is
    fetched: it is written to `model_dir`)."""
    (model_dir / "config.json").write_text(json.dumps(MODEL_CONFIG))
    connector = None
    held = {rid: r["external_tokens"] for rid, r in requests_of(case).items()}
    if any(held.values()):
        connector = {
            "kv_connector": HeldPrefixConnector.__name__,
            "kv_connector_module_path": __name__,
            "kv_role": "kv_both",
        }
    args = EngineArgs(
        model=str(model_dir),
        max_model_len=MAX_MODEL_LEN,
        kv_transfer_config=connector,
        **ENGINE_ARGS,
        **case["engine_args"],
    )
    config = args.create_engine_config()
    for name, value in case["scheduler"].items():
        setattr(config.scheduler_config, name, value)
    config.scheduler_config.max_num_scheduled_tokens = None  # set before each step
    config.cache_config.num_gpu_blocks = case["num_kv_blocks"]
    kv_cache = build_kv_cache_config(case, config)
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache, config)
    kv_cache.hash_block_size = hash_block_size
    kv_cache.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
        kv_cache, config, block_size, hash_block_size
    )
    scheduler = Scheduler(
        vllm_config=config,
        kv_cache_config=kv_cache,
        block_size=block_size,
        hash_block_size=hash_block_size,
        structured_output_manager=StructuredOutputManager(config),
    )
    if connector is not None:
        scheduler.connector.held.update(held)
    return scheduler


def build_kv_cache_config(case: Case, config: Any) -> KVCacheConfig:
    """The model's two KV-cache groups, as its layers declare them: a Mamba2 or KDA
    layer declares one internal prefill checkpoint block at its alignment, a Gated
    DeltaNet layer none."""
    alignment = case["prefill_checkpoint_alignment"]
    attention = FullAttentionSpec(
        block_size=case["attention_block_size"],
        num_kv_heads=MODEL_CONFIG["num_key_value_heads"],
        head_size=MODEL_CONFIG["head_dim"],
        dtype=torch.bfloat16,
    )
    mamba = MambaSpec(
        block_size=config.cache_config.block_size,
        shapes=STATE_SHAPES,
        dtypes=(torch.bfloat16, torch.bfloat16),
        mamba_type=(
            MambaAttentionBackendEnum.MAMBA2
            if alignment == 1
            else MambaAttentionBackendEnum.GDN_ATTN
        ),
        mamba_cache_mode="align",
        num_speculative_blocks=config.num_speculative_tokens,
        num_prefill_checkpoint_blocks=int(alignment is not None),
        prefill_checkpoint_alignment=alignment,
    )
    return KVCacheConfig(
        num_blocks=case["num_kv_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["model.layers.1.self_attn"], attention),
            KVCacheGroupSpec(["model.layers.0.linear_attn"], mamba),
        ],
        prefix_cache_retention_interval=case["engine_args"][
            "prefix_cache_retention_interval"
        ],
    )


@dataclass
class HeldLoads(KVConnectorMetadata):
    loads: list[str] = field(default_factory=list)


class HeldPrefixConnector(KVConnectorBase_V1, SupportsHMA):
    """A scheduler-role KV connector holding each request's first `external_tokens`
    prompt tokens (their KV and the Mamba state there), offered rounded down to the
    attention block; loads are synchronous."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        super().__init__(vllm_config, role, kv_cache_config)
        groups = kv_cache_config.kv_cache_groups
        self.block = groups[ATTENTION_GROUP].kv_cache_spec.block_size
        self.held: dict[str, int] = {}
        self.loads: list[str] = []

    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int, bool]:
        held = min(self.held.get(request.request_id, 0), request.num_prompt_tokens - 1)
        return max(held - held % self.block - num_computed_tokens, 0), False

    def update_state_after_alloc(
        self, request: Any, blocks: Any, num_external_tokens: int
    ) -> None:
        if num_external_tokens:
            self.loads.append(request.request_id)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta, self.loads = HeldLoads(self.loads), []
        return meta

    def request_finished_all_groups(
        self, request: Any, block_ids: Any
    ) -> tuple[bool, None]:
        return False, None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

    def wait_for_layer_load(self, layer_name: str) -> None: ...

    def save_kv_layer(
        self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any
    ) -> None: ...

    def wait_for_save(self) -> None: ...


# ---------------------------------------------------------------- the model runner


@dataclass
class Row:
    """A request's row of the runner's Mamba block table."""

    block_ids: list[int]
    num_computed: int
    state_idx: int | None = None
    num_accepted: int = 1


@dataclass
class Runner:
    """The model runner's Mamba state writes, over exact states (block id -> state)."""

    block: int
    checkpoints: dict[str, Any] | None
    slots: dict[int, State] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)

    def move(self, rid: str, num_scheduled: int) -> int:
        """preprocess_mamba: the running state moves to its current column."""
        row = self.rows[rid]
        prev = row.state_idx
        if prev is None:
            prev = (row.num_computed - 1) // self.block
        curr = -(-(row.num_computed + num_scheduled) // self.block) - 1
        row.state_idx = curr
        if prev != -1 and prev != curr:
            source = row.block_ids[prev + row.num_accepted - 1]
            self.slots[row.block_ids[curr]] = self.slots.get(source, ())
            row.num_accepted = 1
        return curr

    def prefill(self, rid: str, curr: int, tokens: list[int]) -> State:
        """A prefill chunk: the internal checkpoint (if the layer exports one), then
        the chunk end's state in the running column."""
        row = self.rows[rid]
        state = self.slots.get(row.block_ids[curr], ()) if row.num_computed else ()
        row.num_accepted = 1
        if self.checkpoints is not None:
            (offset,), (column,) = compute_mamba_prefill_checkpoints(
                [row.num_computed + len(tokens)],
                [len(tokens)],
                mamba_block_size=self.block,
                **self.checkpoints,
            )
            if column >= 0:
                self.slots[row.block_ids[column]] = state + tuple(tokens[:offset])
        state += tuple(tokens)
        self.slots[row.block_ids[curr]] = state
        return state

    def verify(
        self, rid: str, curr: int, tokens: list[int], num_drafts: int
    ) -> tuple[list[int], State]:
        """A verify step: one state per position, the accepted tokens, and
        postprocess_mamba's copy of a crossed boundary's exact state."""
        row = self.rows[rid]
        state = self.slots.get(row.block_ids[curr + row.num_accepted - 1], ())
        states = []
        for i, token in enumerate(tokens):
            state += (token,)
            states.append(state)
            self.slots[row.block_ids[curr + i]] = state
        targets = [next_token(s) for s in states]
        drafts, accepted = tokens[len(tokens) - num_drafts :], 0
        while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
            accepted += 1
        row.num_accepted = accepted + 1
        running = row.num_computed + len(tokens) - num_drafts
        aligned = (running + row.num_accepted - 1) // self.block * self.block
        if aligned >= running:
            bias, dest = aligned - running, aligned // self.block - 1
            if curr == dest:
                row.num_accepted = 1
            if curr != dest or bias:
                source = row.block_ids[curr + bias]
                self.slots[row.block_ids[dest]] = self.slots.get(source, ())
        return targets[: accepted + 1], states[accepted]


@dataclass
class Outcome:
    """What a replay observed."""

    poisoned: list[str] = field(default_factory=list)
    wrong_outputs: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)  # tokens each resumed from
    first_token_steps: dict[str, int] = field(default_factory=dict)  # from arrival
    forward_passes: int = 0

    def costs(self, prompts: dict[str, int]) -> dict[str, int]:
        """What the user pays: prompt tokens recomputed, forward passes, steps to
        first tokens."""
        return {
            "recomputed tokens": sum(
                n - self.hits.get(r, 0) for r, n in prompts.items()
            ),
            "forward passes": self.forward_passes,
            "steps to first token": sum(
                self.first_token_steps.get(r, 0) for r in prompts
            ),
        }


# ---------------------------------------------------------------- the replay


def replay(case: Case, model_dir: Path) -> Outcome:
    """Drive the case's arrivals, aborts and per-step budgets through `schedule()` and
    `update_from_output()`, mirroring the runner's state writes; audit the prefix
    cache after every step."""
    scheduler = build_scheduler(case, model_dir)
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(scheduler.hash_block_size, hash_fn)
    runner = Runner(scheduler.cache_config.block_size, checkpoints_of(case, scheduler))
    specs = requests_of(case)
    pending, requests = list(specs), {}
    finished: dict[str, int] = {}
    cursor: dict[str, int] = {}
    added: dict[str, int] = {}
    out, stalled, budgets = Outcome(), 0, case["step_budgets"]
    for step in range(case["max_steps"]):
        said = {rid: list(r.output_token_ids) for rid, r in requests.items()}
        for rid in list(pending):
            spec = specs[rid]
            parent = spec["continues"]
            waits = parent is not None and finished.get(parent, step) >= step
            if spec["arrival_step"] > step or waits:
                continue
            params = SamplingParams(
                max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True
            )
            prompt = prompt_of(case, spec, said)
            requests[rid] = Request(rid, prompt, params, None, block_hasher=hasher)
            scheduler.add_request(requests[rid])
            pending.remove(rid)
            added[rid] = step
        for rid, request in requests.items():
            if specs[rid]["abort_step"] == step and not request.is_finished():
                scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        if not pending and not scheduler.has_requests():
            break
        scheduler.max_num_scheduled_tokens = (
            budgets[step]
            if step < len(budgets)
            else case["scheduler"]["max_num_batched_tokens"]
        )
        output = scheduler.schedule()
        admitted = follow_blocks(output, runner)
        loaded = set(getattr(output.kv_connector_metadata, "loads", ()))
        for rid, blocks, computed in admitted:
            runner.rows[rid] = Row(list(blocks), computed)
            if rid in loaded:  # the exact state at num_computed, where it resumes
                column = (computed - 1) // runner.block
                state = tuple(requests[rid].all_token_ids[:computed])
                runner.slots[blocks[column]] = state
            out.hits.setdefault(rid, computed)
        sampled, running = {}, {}
        scheduled = output.num_scheduled_tokens
        columns = {rid: runner.move(rid, n) for rid, n in scheduled.items()}
        for rid, n in scheduled.items():
            request, row = requests[rid], runner.rows[rid]
            spec_tokens = output.scheduled_spec_decode_tokens.get(rid, ())
            drafts = [max(t, 0) for t in spec_tokens]
            end = row.num_computed + n - len(drafts)
            known = list(request.all_token_ids[row.num_computed : end])
            if drafts:
                sampled[rid], running[rid] = runner.verify(
                    rid, columns[rid], known + drafts, len(drafts)
                )
                continue
            running[rid] = runner.prefill(rid, columns[rid], known)
            done = row.num_computed + n >= request.num_tokens
            sampled[rid] = [next_token(running[rid])] if done else []
            if done and row.num_computed < request.num_prompt_tokens:
                out.first_token_steps.setdefault(rid, step - added[rid] + 1)
        out.poisoned += audit(scheduler, runner, requests, step, out.poisoned)
        ids = list(scheduled)
        out.forward_passes += bool(ids)
        scheduler.update_from_output(
            output,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={rid: i for i, rid in enumerate(ids)},
                sampled_token_ids=[sampled[rid] for rid in ids],
            ),
        )
        if scheduler.num_spec_tokens:
            with_drafts = [rid for rid in ids if sampled[rid]]
            drafts = [
                propose(case, rid, running[rid], sampled[rid][-1], scheduler, cursor)
                for rid in with_drafts
            ]
            scheduler.update_draft_token_ids(DraftTokenIds(with_drafts, drafts))
        for rid, request in requests.items():
            if request.is_finished():
                finished.setdefault(rid, step)
        waiting = scheduler.get_num_unfinished_requests()
        stalled = stalled + 1 if waiting and not ids else 0
        if stalled >= STALL_STEPS:
            break
    out.unfinished = sorted(
        set(pending) | {rid for rid, r in requests.items() if not r.is_finished()}
    )
    for rid, request in requests.items():
        said = list(request.output_token_ids)
        exact = greedy(tuple(request.prompt_token_ids), len(said))
        if request.status != RequestStatus.FINISHED_ABORTED and said != exact:
            out.wrong_outputs.append(f"{rid}: {said} where its prompt gives {exact}")
    return out


def checkpoints_of(case: Case, scheduler: Scheduler) -> dict[str, Any] | None:
    """What `compute_mamba_prefill_checkpoints` needs besides the chunk, for a layer
    that exports an internal prefill checkpoint (None for one that does not)."""
    alignment = case["prefill_checkpoint_alignment"]
    if alignment is None:
        return None
    kv_cache = scheduler.kv_cache_config
    return {
        "checkpoint_alignment": alignment,
        "hash_block_size": scheduler.hash_block_size,
        "cache_hit_alignment_tokens": kv_cache.cache_hit_alignment_tokens,
        "drop_eagle_block": scheduler.use_eagle_block_drop,
    }


def follow_blocks(output: Any, runner: Runner) -> list[tuple[str, list[int], int]]:
    """Apply a step's block-table changes to the runner: finished and preempted rows,
    zeroed blocks, the manager's block copies, new blocks of running requests.
    Returns the rows admitted this step (new and resumed requests)."""
    for rid in set(output.finished_req_ids) | set(output.preempted_req_ids or ()):
        if rid in runner.rows:
            runner.rows[rid].state_idx = None
    for rid in output.finished_req_ids:
        runner.rows.pop(rid, None)
    for block in output.new_block_ids_to_zero or ():
        runner.slots.pop(block, None)
    for copy in output.kv_cache_block_copies or ():
        runner.slots[copy.dst_block_id] = runner.slots.get(copy.src_block_id, ())
    admitted = [
        (new.req_id, new.block_ids[MAMBA_GROUP], new.num_computed_tokens)
        for new in output.scheduled_new_reqs
    ]
    cached = output.scheduled_cached_reqs
    for i, rid in enumerate(cached.req_ids):
        blocks = cached.new_block_ids[i]
        if rid in cached.resumed_req_ids:
            mamba = blocks[MAMBA_GROUP] if blocks else []
            admitted.append((rid, mamba, cached.num_computed_tokens[i]))
            continue
        if blocks:
            runner.rows[rid].block_ids.extend(blocks[MAMBA_GROUP])
        runner.rows[rid].num_computed = cached.num_computed_tokens[i]
    return admitted


def propose(
    case: Case,
    rid: str,
    state: State,
    last: int,
    scheduler: Scheduler,
    cursor: dict[str, int],
) -> list[int]:
    """Draft tokens the target samples, but for those the acceptance pattern rejects."""
    pattern = requests_of(case)[rid]["accept"]
    step = cursor.get(rid, 0)
    cursor[rid] = step + 1
    count = scheduler.num_spec_tokens
    correct = min(pattern[step % len(pattern)], count) if pattern else count
    drafts, state = [], state + (last,)
    for i in range(count):
        token = next_token(state)
        if i >= correct:
            token = token % (MODEL_CONFIG["vocab_size"] - 1) + 1
        drafts.append(token)
        state += (token,)
    return drafts


def audit(
    scheduler: Scheduler,
    runner: Runner,
    requests: dict[str, Request],
    step: int,
    seen: list[str],
) -> list[str]:
    """Every Mamba block a request holds that the prefix cache hashes as the state
    after N tokens must hold exactly that state (a block is hashed when a request
    holds it, so every hashed block is seen while its request runs)."""
    manager = scheduler.kv_cache_manager.coordinator.single_type_managers[MAMBA_GROUP]
    found = []
    for rid, blocks in manager.req_to_blocks.items():
        tokens = requests[rid].all_token_ids
        for block in blocks:
            if block.is_null or block.block_hash is None:
                continue
            claimed = tuple(tokens[: block.block_hash_num_tokens])
            held = runner.slots.get(block.block_id, ())
            text = (
                f"Mamba block {block.block_id} hashed as state@{len(claimed)} "
                f"holds state@{len(held)}"
            )
            if held != claimed and not any(s.endswith(text) for s in seen + found):
                found.append(f"step {step}: {text}")
    return found


def assert_replay_holds(case: Case, outcome: Outcome) -> None:
    """The case's asserts: exact slots, exact outputs, every request finished, and no
    more cost than vLLM's split paid (where the case records it)."""
    assert outcome.poisoned == [], "Mamba blocks hashed as a state they do not hold"
    assert outcome.wrong_outputs == [], "requests that did not compute their prompts"
    assert outcome.unfinished == [], "requests never finished"
    paid = case["reference_costs"]
    if paid is not None:  # not costlier in one cost unless cheaper in another
        costs = outcome.costs(paid["prompt_tokens"])
        worse = [name for name, cost in costs.items() if cost > paid[name]]
        better = [name for name, cost in costs.items() if cost < paid[name]]
        assert not worse or better, f"costs {costs} where vLLM's split paid {paid}"


def case_test(test_file: str) -> Callable[[Path], None]:
    """The test of the case in `case.json` beside `test_file` (a bundle's test)."""
    case = json.loads(Path(test_file).with_name("case.json").read_text())

    def test(tmp_path: Path) -> None:
        assert_replay_holds(case, replay(case, tmp_path))

    return test


def suite_test(test_file: str) -> Callable[[Case, Path], None]:
    """The test of each case in the JSON list beside `test_file` (its name, `.json` for
    `.py`): an entry is `{"id", "found", "case", "xfail"}`, `xfail` the reason where
    vLLM's own split fails the case (strict: a fix makes it fail until unmarked)."""
    entries = json.loads(Path(test_file).with_suffix(".json").read_text())
    params = [
        pytest.param(
            entry["case"],
            id=entry["id"],
            marks=[pytest.mark.xfail(strict=True, reason=entry["xfail"])]
            if entry["xfail"]
            else [],
        )
        for entry in entries
    ]

    @pytest.mark.parametrize("case", params)
    def test(case: Case, tmp_path: Path) -> None:
        assert_replay_holds(case, replay(case, tmp_path))

    return test
