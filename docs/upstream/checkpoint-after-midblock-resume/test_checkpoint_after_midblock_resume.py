"""Regression test for gdnfuzz finding both-side-poison-unaligned-end-no-spec-internal-checkpoint: slot hashed as state@32 holds state@16.

Found on the split `vllm` itself; vLLM 0.32.0 (commit unknown: a release wheel).

Configuration, as vLLM is started for it:

    vllm serve '<a hybrid GDN model, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct>' --enable-prefix-caching --mamba-cache-mode align --mamba-block-size 32 --block-size 32 --prefix-match-unit 16 --max-num-batched-tokens 2048 --long-prefill-token-threshold 0 --max-num-seqs 16 --prefix-cache-retention-interval 0

- a hybrid model whose full-attention KV blocks hold 16 tokens (the Mamba block B is 32)
- Mamba2/KDA-style layers whose MambaSpec declares one internal prefill checkpoint block with alignment 1 (Mamba2 declares 1)

Code involved: Scheduler._mamba_block_aligned_split (vllm/v1/core/sched/scheduler.py:443); KVCacheManager.allocate_slots (vllm/v1/core/kv_cache_manager.py:371); MambaManager (vllm/v1/core/single_type_kv_cache_manager.py:1415)

It drives vLLM's real Scheduler and KV-cache manager through the finding's exact arrivals and per-step
budgets, mirrors what the model runner writes into the Mamba state slots over exact states, and asserts
what the finding broke. It fails while the bug is there and passes once it is fixed: run it with
`pytest <this file>`. Exported by `gdnfuzz export-test`; it imports nothing of gdnfuzz.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
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
from vllm.model_executor.layers.mamba.checkpoint import compute_mamba_prefill_checkpoints
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core.kv_cache_utils import (
    get_block_hash,
    get_group_id,
    get_request_block_hasher,
    init_none_hash,
    resolve_cache_hit_alignment_tokens,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

# ---------------------------------------------------------------- the finding (written by gdnfuzz export-test)
SCENARIO: dict[str, Any] = {'signature': 'both-side-poison-unaligned-end-no-spec-internal-checkpoint',
 'seed': 0,
 'segments': {},
 'requests': [{'id': 'r0',
               'prompt': [32],
               'arrival_step': 0,
               'max_tokens': 1,
               'abort_step': None,
               'continues': None,
               'accept': [],
               'external_tokens': 1},
              {'id': 'r1',
               'prompt': [32],
               'arrival_step': 0,
               'max_tokens': 1,
               'abort_step': None,
               'continues': 'r0',
               'accept': [],
               'external_tokens': 0}],
 'engine_args': {'mamba_block_size': 32,
                 'block_size': 32,
                 'prefix_match_unit': 16,
                 'speculative_config': None,
                 'prefix_cache_retention_interval': 0,
                 'enable_mamba_shared_prefix_checkpoint': False},
 'scheduler': {'max_num_batched_tokens': 2048, 'long_prefill_token_threshold': 0, 'max_num_seqs': 16},
 'step_budgets': [],
 'attention_block_size': 16,
 'prefill_checkpoint_alignment': 1,
 'model_config': {'architectures': ['Qwen3NextForCausalLM'],
                  'model_type': 'qwen3_next',
                  'vocab_size': 32000,
                  'hidden_size': 128,
                  'intermediate_size': 256,
                  'num_hidden_layers': 2,
                  'layer_types': ['linear_attention', 'full_attention'],
                  'num_attention_heads': 8,
                  'num_key_value_heads': 8,
                  'head_dim': 256,
                  'partial_rotary_factor': 0.25,
                  'rope_theta': 10000.0,
                  'linear_conv_kernel_dim': 4,
                  'linear_key_head_dim': 128,
                  'linear_value_head_dim': 128,
                  'linear_num_key_heads': 1,
                  'linear_num_value_heads': 2,
                  'num_experts': 4,
                  'num_experts_per_tok': 4,
                  'moe_intermediate_size': 64,
                  'shared_expert_intermediate_size': 64,
                  'decoder_sparse_step': 1,
                  'mlp_only_layers': [1],
                  'norm_topk_prob': True,
                  'num_nextn_predict_layers': 1,
                  'hidden_act': 'silu',
                  'rms_norm_eps': 1e-06,
                  'initializer_range': 0.2,
                  'max_position_embeddings': 16384,
                  'tie_word_embeddings': False,
                  'attention_bias': False,
                  'attention_dropout': 0.0,
                  'torch_dtype': 'bfloat16',
                  'bos_token_id': 1,
                  'eos_token_id': 2},
 'state_shapes': [[3, 512], [2, 128, 128]],
 'num_kv_blocks': 1024,
 'max_steps': 196,
 'max_model_len': 16384,
 'reference_costs': None}
# ---------------------------------------------------------------- end of the finding

MAMBA_GROUP = 1
STALL_STEPS = 16


def tokens_for(key: str, length: int) -> tuple[int, ...]:
    """``length`` token ids for a named prompt part (shared segments are the same tokens everywhere)."""
    words: list[int] = []
    for counter in range(-(-length // 16)):
        digest = hashlib.blake2b(f"{SCENARIO['seed']}/{key}/{counter}".encode(), digest_size=64).digest()
        words += array("I", digest).tolist()
    return tuple(w % (SCENARIO["model_config"]["vocab_size"] - 1) + 1 for w in words[:length])


def next_token(state: tuple[int, ...]) -> int:
    """The toy model: the greedy token after an exact state."""
    digest = hashlib.blake2b(array("I", state).tobytes(), digest_size=16).digest()
    return int.from_bytes(digest[:4], "little") % (SCENARIO["model_config"]["vocab_size"] - 1) + 1


def greedy(state: tuple[int, ...], count: int) -> list[int]:
    out: list[int] = []
    for _ in range(count):
        out.append(next_token(state))
        state += (out[-1],)
    return out


def prompt_of(spec: dict[str, Any], said: dict[str, list[int]]) -> list[int]:
    """A request's prompt: its parent's conversation (for a follow-up), then its own parts."""
    head: list[int] = []
    if spec["continues"] is not None:
        parent = next(r for r in SCENARIO["requests"] if r["id"] == spec["continues"])
        head = prompt_of(parent, said) + list(said[parent["id"]])
    own: list[int] = []
    for index, part in enumerate(spec["prompt"]):
        if isinstance(part, str):
            own += tokens_for(f"segment:{part}", SCENARIO["segments"][part])
        else:
            own += tokens_for(f"tail:{spec['id']}:{index}", part)
    return head + own


# ---------------------------------------------------------------- vLLM's scheduler, as the engine builds it


def build_scheduler(model_dir: Any) -> Scheduler:
    (model_dir / "config.json").write_text(json.dumps(SCENARIO["model_config"]))
    connector = None
    if any(r["external_tokens"] for r in SCENARIO["requests"]):
        connector = {"kv_connector": "HeldPrefixConnector", "kv_connector_module_path": __name__, "kv_role": "kv_both"}
    args = EngineArgs(model=str(model_dir), skip_tokenizer_init=True, load_format="dummy", dtype="bfloat16",
                      enforce_eager=True, max_model_len=SCENARIO["max_model_len"], enable_prefix_caching=True,
                      mamba_cache_mode="align", async_scheduling=False, kv_transfer_config=connector,
                      **SCENARIO["engine_args"])
    config = args.create_engine_config()
    for name, value in SCENARIO["scheduler"].items():
        setattr(config.scheduler_config, name, value)
    config.scheduler_config.max_num_scheduled_tokens = None  # each step's budget is set before it
    blocks = SCENARIO["num_kv_blocks"]
    config.cache_config.num_gpu_blocks = blocks
    shape = SCENARIO["model_config"]
    attention = FullAttentionSpec(block_size=SCENARIO["attention_block_size"], num_kv_heads=shape["num_key_value_heads"],
                                  head_size=shape["head_dim"], dtype=torch.bfloat16)
    alignment = SCENARIO["prefill_checkpoint_alignment"]
    mamba = MambaSpec(block_size=config.cache_config.block_size, shapes=tuple(map(tuple, SCENARIO["state_shapes"])),
                      dtypes=(torch.bfloat16, torch.bfloat16), mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                      mamba_cache_mode="align", num_speculative_blocks=config.num_speculative_tokens,
                      num_prefill_checkpoint_blocks=int(alignment is not None), prefill_checkpoint_alignment=alignment)
    kv_cache = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                             kv_cache_groups=[KVCacheGroupSpec(["model.layers.1.self_attn"], attention),
                                              KVCacheGroupSpec(["model.layers.0.linear_attn"], mamba)],
                             prefix_cache_retention_interval=SCENARIO["engine_args"]["prefix_cache_retention_interval"])
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache, config)
    kv_cache.hash_block_size = hash_block_size
    kv_cache.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(kv_cache, config, block_size,
                                                                             hash_block_size)
    scheduler = Scheduler(vllm_config=config, kv_cache_config=kv_cache, block_size=block_size,
                          hash_block_size=hash_block_size, structured_output_manager=StructuredOutputManager(config))
    for request in SCENARIO["requests"]:
        if request["external_tokens"]:
            scheduler.connector.held[request["id"]] = request["external_tokens"]
    return scheduler


@dataclass
class HeldLoads(KVConnectorMetadata):
    loads: list[str] = field(default_factory=list)


class HeldPrefixConnector(KVConnectorBase_V1, SupportsHMA):
    """A scheduler-role KV connector holding each request's first ``external_tokens`` prompt tokens (their KV
    and the Mamba state there), offered rounded down to the attention block; loads are synchronous."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        super().__init__(vllm_config, role, kv_cache_config)
        self.block = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size
        self.held: dict[str, int] = {}
        self.loads: list[str] = []

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        held = min(self.held.get(request.request_id, 0), request.num_prompt_tokens - 1)
        return max(held - held % self.block - num_computed_tokens, 0), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens:
            self.loads.append(request.request_id)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta, self.loads = HeldLoads(self.loads), []
        return meta

    def request_finished_all_groups(self, request: Any, block_ids: Any) -> tuple[bool, None]:
        return False, None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

    def wait_for_layer_load(self, layer_name: str) -> None: ...

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None: ...

    def wait_for_save(self) -> None: ...


# ---------------------------------------------------------------- the model runner, mirrored over exact states


@dataclass
class Row:
    block_ids: list[int]
    num_computed: int
    state_idx: int | None = None
    num_accepted: int = 1


@dataclass
class Runner:
    block: int
    checkpoints: dict[str, Any] | None
    slots: dict[int, tuple[int, ...]] = field(default_factory=dict)
    rows: dict[str, Row] = field(default_factory=dict)

    def move(self, rid: str, num_scheduled: int) -> int:
        """preprocess_mamba: the running state moves to its current column."""
        row = self.rows[rid]
        prev = row.state_idx if row.state_idx is not None else (row.num_computed - 1) // self.block
        curr = -(-(row.num_computed + num_scheduled) // self.block) - 1
        row.state_idx = curr
        if prev != -1 and prev != curr:
            self.slots[row.block_ids[curr]] = self.slots.get(row.block_ids[prev + row.num_accepted - 1], ())
            row.num_accepted = 1
        return curr

    def prefill(self, rid: str, curr: int, tokens: list[int]) -> tuple[int, ...]:
        row = self.rows[rid]
        state = self.slots.get(row.block_ids[curr], ()) if row.num_computed else ()
        row.num_accepted = 1
        if self.checkpoints is not None:
            c = self.checkpoints
            (offset,), (column,) = compute_mamba_prefill_checkpoints(
                [row.num_computed + len(tokens)], [len(tokens)], hash_block_size=c["hash_block_size"],
                mamba_block_size=self.block, checkpoint_alignment=c["alignment"], drop_eagle_block=c["drop"],
                cache_hit_alignment_tokens=c["cache_hit_alignment_tokens"])
            if column >= 0:
                self.slots[row.block_ids[column]] = state + tuple(tokens[:offset])
        state += tuple(tokens)
        self.slots[row.block_ids[curr]] = state
        return state

    def verify(self, rid: str, curr: int, tokens: list[int], num_drafts: int) -> tuple[list[int], tuple[int, ...]]:
        row = self.rows[rid]
        state = self.slots.get(row.block_ids[curr + row.num_accepted - 1], ())
        states = []
        for i, token in enumerate(tokens):
            state += (token,)
            states.append(state)
            self.slots[row.block_ids[curr + i]] = state
        targets = [next_token(s) for s in states]
        drafts, accepted = tokens[len(tokens) - num_drafts:], 0
        while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
            accepted += 1
        row.num_accepted = accepted + 1
        # postprocess_mamba: accepted tokens that crossed a boundary leave its exact state in its column
        running = row.num_computed + len(tokens) - num_drafts
        aligned = (running + row.num_accepted - 1) // self.block * self.block
        if aligned >= running:
            bias, dest = aligned - running, aligned // self.block - 1
            if curr == dest:
                row.num_accepted = 1
            if curr != dest or bias:
                self.slots[row.block_ids[dest]] = self.slots.get(row.block_ids[curr + bias], ())
        return targets[:accepted + 1], states[accepted]


@dataclass
class Outcome:
    poisoned: list[str] = field(default_factory=list)
    wrong_outputs: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)  # tokens each request resumed from
    first_token_steps: dict[str, int] = field(default_factory=dict)  # steps from arrival to its last prompt chunk
    forward_passes: int = 0

    def costs(self, prompts: dict[str, int]) -> dict[str, int]:
        """What the user pays: prompt tokens recomputed, forward passes, steps to first tokens."""
        return {"recomputed tokens": sum(n - self.hits.get(rid, 0) for rid, n in prompts.items()),
                "forward passes": self.forward_passes,
                "steps to first token": sum(self.first_token_steps.get(rid, 0) for rid in prompts)}


def run_scenario(model_dir: Any) -> Outcome:
    scheduler = build_scheduler(model_dir)
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(scheduler.hash_block_size, hash_fn)
    kv = scheduler.kv_cache_config
    checkpoints = None if SCENARIO["prefill_checkpoint_alignment"] is None else {
        "alignment": SCENARIO["prefill_checkpoint_alignment"], "hash_block_size": scheduler.hash_block_size,
        "cache_hit_alignment_tokens": kv.cache_hit_alignment_tokens, "drop": scheduler.use_eagle_block_drop}
    runner = Runner(scheduler.cache_config.block_size, checkpoints)
    specs = {r["id"]: r for r in SCENARIO["requests"]}
    pending, requests, finished, cursor, added = list(specs), {}, {}, {}, {}
    preimages: dict[Any, tuple[int, ...]] = {}
    out, stalled, budgets = Outcome(), 0, SCENARIO["step_budgets"]
    for step in range(SCENARIO["max_steps"]):
        said = {rid: list(r.output_token_ids) for rid, r in requests.items()}
        for rid in [r for r in pending if specs[r]["arrival_step"] <= step and (
                specs[r]["continues"] is None or finished.get(specs[r]["continues"], step) < step)]:
            spec = specs[rid]
            params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0.0, ignore_eos=True)
            requests[rid] = Request(rid, prompt_of(spec, said), params, None, block_hasher=hasher)
            scheduler.add_request(requests[rid])
            pending.remove(rid)
            added[rid] = step
        for rid, request in requests.items():
            if specs[rid]["abort_step"] == step and not request.is_finished():
                scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
        if not pending and not scheduler.has_requests():
            break
        scheduler.max_num_scheduled_tokens = budgets[step] if step < len(budgets) else SCENARIO["scheduler"][
            "max_num_batched_tokens"]
        output = scheduler.schedule()
        for rid in set(output.finished_req_ids) | set(output.preempted_req_ids or ()):
            if rid in runner.rows:
                runner.rows[rid].state_idx = None
        for rid in output.finished_req_ids:
            runner.rows.pop(rid, None)
        for block in output.new_block_ids_to_zero or ():
            runner.slots.pop(block, None)
        for copy in output.kv_cache_block_copies or ():
            runner.slots[copy.dst_block_id] = runner.slots.get(copy.src_block_id, ())
        loaded = set(getattr(output.kv_connector_metadata, "loads", ()))
        admitted = [(new.req_id, new.block_ids[MAMBA_GROUP], new.num_computed_tokens)
                    for new in output.scheduled_new_reqs]
        cached = output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            blocks = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                admitted.append((rid, blocks[MAMBA_GROUP] if blocks else [], cached.num_computed_tokens[i]))
            else:
                if blocks:
                    runner.rows[rid].block_ids.extend(blocks[MAMBA_GROUP])
                runner.rows[rid].num_computed = cached.num_computed_tokens[i]
        for rid, blocks, computed in admitted:
            runner.rows[rid] = Row(list(blocks), computed)
            if rid in loaded:  # the connector's load: the exact state at num_computed, where the runner resumes
                runner.slots[blocks[(computed - 1) // runner.block]] = tuple(requests[rid].all_token_ids[:computed])
            out.hits.setdefault(rid, computed)
        sampled, running = {}, {}
        columns = {rid: runner.move(rid, n) for rid, n in output.num_scheduled_tokens.items()}
        for rid, n in output.num_scheduled_tokens.items():
            request, row = requests[rid], runner.rows[rid]
            drafts = [max(t, 0) for t in output.scheduled_spec_decode_tokens.get(rid, ())]
            known = list(request.all_token_ids[row.num_computed: row.num_computed + n - len(drafts)])
            if drafts:
                sampled[rid], running[rid] = runner.verify(rid, columns[rid], known + drafts, len(drafts))
            else:
                running[rid] = runner.prefill(rid, columns[rid], known)
                done = row.num_computed + n >= request.num_tokens
                sampled[rid] = [next_token(running[rid])] if done else []
                if done and row.num_computed < request.num_prompt_tokens:
                    out.first_token_steps.setdefault(rid, step - added[rid] + 1)
        ids = list(output.num_scheduled_tokens)
        out.forward_passes += bool(ids)
        scheduler.update_from_output(output, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=[sampled[rid] for rid in ids]))
        if scheduler.num_spec_tokens:
            draft_ids = [rid for rid in ids if sampled[rid]]
            scheduler.update_draft_token_ids(DraftTokenIds(draft_ids, [
                propose(rid, running[rid], sampled[rid][-1], scheduler.num_spec_tokens, cursor) for rid in draft_ids]))
        for rid, request in requests.items():
            for i, block_hash in enumerate(request.block_hashes):
                preimages.setdefault(block_hash, tuple(request.all_token_ids[:(i + 1) * scheduler.hash_block_size]))
            if request.is_finished():
                finished.setdefault(rid, step)
        out.poisoned += audit(scheduler, runner, preimages, step, out.poisoned)
        stalled = stalled + 1 if scheduler.get_num_unfinished_requests() and not ids else 0
        if stalled >= STALL_STEPS:
            break
    out.unfinished = sorted(set(pending) | {rid for rid, r in requests.items() if not r.is_finished()})
    for rid, request in requests.items():
        exact = greedy(tuple(request.prompt_token_ids), len(request.output_token_ids))
        if request.status != RequestStatus.FINISHED_ABORTED and list(request.output_token_ids) != exact:
            out.wrong_outputs.append(f"{rid}: {list(request.output_token_ids)} where its prompt gives {exact}")
    return out


def propose(rid: str, state: tuple[int, ...], last: int, count: int, cursor: dict[str, int]) -> list[int]:
    """Draft tokens the target samples, but for those the acceptance pattern rejects."""
    pattern = next(r for r in SCENARIO["requests"] if r["id"] == rid)["accept"]
    step = cursor.get(rid, 0)
    cursor[rid] = step + 1
    correct = min(pattern[step % len(pattern)], count) if pattern else count
    drafts, state = [], state + (last,)
    for i in range(count):
        token = next_token(state)
        drafts.append(token if i < correct else token % (SCENARIO["model_config"]["vocab_size"] - 1) + 1)
        state += (drafts[-1],)
    return drafts


def audit(scheduler: Scheduler, runner: Runner, preimages: dict[Any, tuple[int, ...]], step: int,
          seen: list[str]) -> list[str]:
    """Every Mamba block hashed into the prefix cache must hold exactly the state its hash claims."""
    found = []
    for key, entry in scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block._cache.items():
        if get_group_id(key) != MAMBA_GROUP:
            continue
        claimed = preimages[get_block_hash(key)]
        for block in entry.values() if isinstance(entry, dict) else [entry]:
            held = runner.slots.get(block.block_id, ())
            text = f"step {step}: Mamba block {block.block_id} hashed as state@{len(claimed)} holds state@{len(held)}"
            if held != claimed and not any(s.split(": ", 1)[1] == text.split(": ", 1)[1] for s in seen + found):
                found.append(text)
    return found


def test_both_side_poison_unaligned_end_no_spec_internal_checkpoint(tmp_path: Any) -> None:
    outcome = run_scenario(tmp_path)
    assert outcome.poisoned == [], "Mamba blocks hashed as a state they do not hold"
    assert outcome.wrong_outputs == [], "requests that did not compute what their prompts give"
    assert outcome.unfinished == [], "requests never finished (nothing scheduled while they waited)"
    reference = SCENARIO["reference_costs"]
    if reference is not None:  # a cost finding: not costlier than vLLM's split in one cost and cheaper in none
        costs = outcome.costs(reference["prompt_tokens"])
        worse = [name for name, paid in costs.items() if paid > reference[name]]
        better = [name for name, paid in costs.items() if paid < reference[name]]
        assert not worse or better, f"costs {costs} where vLLM's split paid {reference}"


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
