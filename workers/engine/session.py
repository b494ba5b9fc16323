"""Run scenarios on live vLLM engines in this process: the engine tier's inner loop.

:class:`EngineSession` keeps a warm ``LLMEngine`` per :class:`EngineKey` and a truth engine (no prefix caching);
``run`` drives the scenario's ``Drive`` with per-step budgets, the contract-checked split, greedy sampling and a
reset prefix cache. B is the engine's ``block_size``; a B or pool it cannot run exactly is :class:`Unsupported`.
The audit compares each hashed slot, copied after its step, with a truth recomputation; the canary must be caught."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from fuzz.errors import GdnfuzzError
from fuzz.model.drive import Drive
from fuzz.model.knobs import EngineKnobs, engine_args, scheduler_settings
from fuzz.model.knobs import unsupported_reason as knobs_unsupported
from fuzz.model.policies import Policy, contract_checked
from fuzz.model.result import Chunk, Fault, PoisonedSlot, RequestOutcome, RunResult, RunStatus, StepRecord
from fuzz.model.scenario import (
    MAX_CONTEXT,
    Request,
    Scenario,
    conversation_lengths,
    own_prompt_tokens,
    prompt_tokens,
)
from workers.engine import cpu_align_kernels
from workers.engine import state as engine_state
from workers.engine.state import SlotState

ENGINE_MAX_BATCHED = 8192  # runner buffers; per-step budgets go up to it
ENGINE_MAX_SEQS = 64  # a scenario has at most 64 requests
TOP_K = 5
MAX_STEPS = 20_000
CANARY_OFFSET = 8
GPU_MEMORY_FRACTION = 0.2  # on a GPU: the tiny model needs little, and a verifier may share the card
# Measured (bench/engine_throughput.py): correct slots sit 0.004..0.007 from their recomputation
# (bf16, other chunking); a state CANARY_OFFSET tokens off, or a naive split's state@364, sits at 1.40
# (the conv state holds the last inputs, so any position change is a full change there).
STATE_TOLERANCE = 0.05
TRUTH = "truth"
# RequestOutput.finish_reason -> the scheduler's RequestStatus name, which the sim tier reports.
FINISH_STATUS = {"length": "FINISHED_LENGTH_CAPPED", "stop": "FINISHED_STOPPED", "abort": "FINISHED_ABORTED"}


class Unsupported(GdnfuzzError):
    """A knob this platform's engine cannot honour; the message says which and why."""


def unsupported_reason(scenario: Scenario) -> str | None:
    """Why the CPU engine cannot run ``scenario`` as written, or None when it can."""
    k = scenario.engine
    installed = knobs_unsupported(k)
    if installed is not None:
        return installed
    if k.spec_decode == "eagle":
        return "spec_decode='eagle': the tiny model has no EAGLE draft head (its MTP head runs as spec_decode='mtp')"
    if any(r.external_tokens for r in scenario.requests):
        return ("external_tokens need a KV connector holding the scenario's prefixes; the shipped offload "
                "connectors only hold what this engine saved, and the sim's ScenarioConnector has no worker side")
    if k.prefill_checkpoint_alignment is not None:
        return ("prefill_checkpoint_alignment needs a Mamba2/KDA layer; the tiny model is GDN (no checkpoint "
                "blocks), and Mamba2's checkpoint export (ops/ssd_checkpoint.py) is a Triton kernel, off on CPU")
    if max((k.max_num_batched_tokens, *k.step_budgets)) > ENGINE_MAX_BATCHED:
        return f"a step budget above {ENGINE_MAX_BATCHED} tokens (the engine's batch buffers)"
    if k.mamba_block_size % 32:
        return f"mamba_block_size {k.mamba_block_size}: the CPU attention backend needs a multiple of 32"
    return None


@dataclass(frozen=True)
class EngineKey:
    """What needs an engine of its own: the engine and pool args (``fuzz.model.knobs.engine_args``, canonical JSON);
    None is the truth engine. Scheduler knobs are set per run."""

    args: str | None

    @classmethod
    def of(cls, knobs: EngineKnobs) -> EngineKey:
        return cls(json.dumps(engine_args(knobs, ("engine", "pool")), sort_keys=True))

    @property
    def engine_args(self) -> dict[str, Any]:
        return {} if self.args is None else json.loads(self.args)

    @property
    def block_size(self) -> int | None:
        """B: the Mamba block the engine must run (None for the truth engine)."""
        return self.engine_args.get("mamba_block_size")


POOL_HOLDS = re.compile(r"estimated maximum model length is (\d+)")  # vLLM's refusal of a small KV pool


def too_long_for(engine: Any, scenario: Scenario) -> str | None:
    """Why ``engine`` cannot run ``scenario`` whole: a request that would reach its ``max_model_len``."""
    limit = engine.vllm_config.model_config.max_model_len
    rid, longest = max(conversation_lengths(scenario).items(), key=lambda kv: kv[1])
    if longest < limit:
        return None
    return (f"request {rid} may hold {longest} tokens, and vLLM's engine with a pool of "
            f"{scenario.engine.num_kv_blocks} blocks holds requests of at most {limit} (its max_model_len)")


def build_engine(key: EngineKey) -> Any:
    """A warm LLMEngine over the tiny model; raises Unsupported if vLLM changes the block size."""
    from vllm import EngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.engine.llm_engine import LLMEngine

    from workers.engine.scheduler import GdnfuzzScheduler
    from workers.tiny_model import tiny_model_dir

    args = key.engine_args
    kwargs: dict[str, Any] = dict(
        model=str(tiny_model_dir()), skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True, seed=0,
        max_model_len=MAX_CONTEXT, max_num_batched_tokens=ENGINE_MAX_BATCHED, max_num_seqs=ENGINE_MAX_SEQS,
        enable_chunked_prefill=True, async_scheduling=False, scheduler_cls=GdnfuzzScheduler,
        enable_prefix_caching=key.args is not None, use_tqdm_on_load=False, **args)
    if key.args is not None:
        kwargs["mamba_cache_mode"] = "align"
    if args.get("speculative_config"):
        cpu_align_kernels.register()
    if not current_platform.is_cpu():
        kwargs["gpu_memory_utilization"] = GPU_MEMORY_FRACTION
    try:
        engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    except ValueError as exc:
        held = POOL_HOLDS.search(str(exc))
        if held is None or args.get("num_gpu_blocks_override") is None:
            raise
        kwargs["max_model_len"] = int(held.group(1))  # the longest request vLLM says this pool holds
        engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    chosen = engine.vllm_config.cache_config.mamba_block_size
    if key.block_size is not None and chosen != key.block_size:
        raise Unsupported(f"mamba_block_size {key.block_size}: the engine raised it to {chosen} so that the "
                          "attention page holds the Mamba page (the smallest B this model allows)")
    return engine


def _scheduler(engine: Any) -> Any:
    return engine.engine_core.engine_core.scheduler


def _mamba_group(scheduler: Any) -> int:
    from vllm.v1.kv_cache_interface import MambaSpec

    return next(i for i, g in enumerate(scheduler.kv_cache_config.kv_cache_groups)
                if isinstance(g.kv_cache_spec, MambaSpec))


def _digest(tokens: tuple[int, ...] | list[int]) -> str:
    return hashlib.blake2b(repr(tuple(tokens)).encode(), digest_size=16).hexdigest()


@dataclass
class Hashed:
    """A Mamba block hashed into the prefix cache during a run, and the state it held after that step."""

    step: int
    block_id: int
    request_id: str
    column: int
    claimed: int
    tokens: tuple[int, ...]
    state: SlotState | None = None
    canary: bool = False


@dataclass
class _Live:
    """Book-keeping for one request of the run (the engine's id is ``run_tag/rid``)."""

    request: Request
    prompt: list[int] = field(default_factory=list)
    added_step: int | None = None
    first_step: int | None = None
    finish_step: int | None = None
    hit: int | None = None
    resume_block: int | None = None
    output: Any = None


class ScenarioRun:
    """One scenario on one engine: the step loop, the per-step records and the hashed-block capture."""

    def __init__(self, engine: Any, scenario: Scenario, policy: Policy | None, tag: str, block_size: int | None):
        self.engine, self.scenario, self.tag, self.block_size = engine, scenario, tag, block_size
        self.faults: list[Fault] = []
        self.scheduler = _scheduler(engine)
        self.group = _mamba_group(self.scheduler)
        self.live = {r.id: _Live(r) for r in scenario.requests}
        self.steps: list[StepRecord] = []
        self.hashed: list[Hashed] = []
        self._seen: set[tuple[int, bytes]] = set()
        self._new: list[Hashed] = []
        self.notes: list[str] = []
        self.step = 0
        self.scheduler.split = None if policy is None else contract_checked(policy.split, self._violation)
        self.scheduler.observer = self._observe

    def request_id(self, engine_id: str) -> str:
        """The scenario's id of an engine request (``tag/rid``, plus the ``-suffix`` vLLM appends inside)."""
        rid = engine_id.split("/", 1)[1]
        return rid if rid in self.live else rid.rsplit("-", 1)[0]

    def _violation(self, request: Any, detail: str) -> None:
        self.faults.append(Fault(kind="contract", detail=detail, step=self.step,
                                 request_id=self.request_id(request.request_id)))

    # ------------------------------------------------------------ observer (inside schedule())

    def _observe(self, scheduler: Any, output: Any) -> None:
        record = StepRecord(step=self.step, budget=scheduler.max_num_scheduled_tokens)
        for engine_id, n in output.num_scheduled_tokens.items():
            rid = self.request_id(engine_id)
            req = scheduler.requests[engine_id]
            start = req.num_computed_tokens - n
            blocks = scheduler.kv_cache_manager.get_blocks(engine_id).blocks[self.group]
            column = (start + n - 1) // self.block_size if self.block_size else 0
            write = blocks[column].block_id if column < len(blocks) and not blocks[column].is_null else -1
            record.chunks.append(Chunk(rid, start, n, state_column=column, write_blocks=[write]))
            live = self.live[rid]
            if live.first_step is None:
                live.first_step, live.hit = self.step, start
                if self.block_size and start >= self.block_size:
                    live.resume_block = blocks[start // self.block_size - 1].block_id
            for col, blk in enumerate(blocks):
                if blk.is_null or blk.block_hash is None or (blk.block_id, bytes(blk.block_hash)) in self._seen:
                    continue
                self._seen.add((blk.block_id, bytes(blk.block_hash)))
                claimed = blk.block_hash_num_tokens or (col + 1) * (self.block_size or 0)
                entry = Hashed(self.step, blk.block_id, rid, col, claimed, tuple(req.all_token_ids[:claimed]))
                self.hashed.append(entry)
                self._new.append(entry)
        self.steps.append(record)

    # ------------------------------------------------------------ the step loop

    def _said(self) -> dict[str, list[int]]:
        """What each request has output so far (an aborted parent: what it produced by then)."""
        return {rid: list(live.output.outputs[0].token_ids) if live.output is not None else []
                for rid, live in self.live.items()}

    def upcoming_prompts(self) -> list[list[int]]:
        """Known prefixes of the requests not added yet (a follow-up: at least its parent's prompt)."""
        prompts = []
        for live in self.live.values():
            if live.added_step is None:
                parent = self.live.get(live.request.continues or "")
                prompts.append(parent.prompt if parent else own_prompt_tokens(self.scenario, live.request))
        return prompts

    def execute(self, after_step: Any = None) -> None:
        """Drive the scenario to completion (its ``Drive``); ``after_step(run, new_hashed)`` runs after each step."""
        from vllm import SamplingParams

        knobs = self.scenario.engine
        settings = scheduler_settings(knobs)
        # The engine was built for the largest batch; the run's own limits are set on its scheduler (the
        # running-request cap is read once, at construction, so it is set where the scheduler keeps it).
        self.scheduler.max_num_running_reqs = self.scheduler.max_num_active_reqs = settings["max_num_seqs"]
        self.scheduler.scheduler_config.long_prefill_token_threshold = settings["long_prefill_token_threshold"]
        drive = Drive(self.scenario, MAX_STEPS)
        while drive.unfinished:
            step = self.step
            for request in drive.arrivals(step):
                live = self.live[request.id]
                live.prompt, live.added_step = prompt_tokens(self.scenario, request, self._said()), step
                params = SamplingParams(temperature=0.0, max_tokens=request.max_tokens, logprobs=TOP_K,
                                        ignore_eos=True)
                self.engine.add_request(f"{self.tag}/{request.id}", {"prompt_token_ids": live.prompt}, params)
            for rid in drive.aborts(step):
                self.engine.abort_request([f"{self.tag}/{rid}"])
                self.live[rid].finish_step = step
            self.scheduler.max_num_scheduled_tokens = knobs.budget_at(step)
            begun = time.perf_counter()
            outputs = self.engine.step() if self.engine.has_unfinished_requests() else []
            if self.steps and self.steps[-1].step == step:
                self.steps[-1].seconds = time.perf_counter() - begun  # what the user waits for this step
            for out in outputs:
                rid = self.request_id(out.request_id)
                live = self.live[rid]
                if live.finish_step is None:
                    live.output = out  # cumulative: an aborted request keeps what it produced
                    if out.finished:
                        live.finish_step = step
                        drive.finish(rid, step)
            new, self._new = self._new, []
            if after_step is not None:
                after_step(self, new)
            for entry in new:
                entry.state = engine_state.read_slot(self.engine, entry.block_id)
            self.step += 1
            scheduled = bool(self.steps) and self.steps[-1].step == step and bool(self.steps[-1].chunks)
            fault = drive.liveness(step, scheduled)
            if fault is not None:
                self.faults.append(fault)
                break
        stuck = [f"{self.tag}/{rid}" for rid, live in self.live.items()
                 if live.added_step is not None and live.finish_step is None]
        if stuck:  # a run ended by a liveness fault leaves nothing behind in the warm engine
            self.engine.abort_request(stuck)
        self.scheduler.split = self.scheduler.observer = None

    def outcomes(self) -> dict[str, RequestOutcome]:
        result: dict[str, RequestOutcome] = {}
        for rid, live in self.live.items():
            outcome = RequestOutcome(id=rid, prompt_tokens=len(live.prompt), hit_tokens=live.hit or 0,
                                     first_step=live.first_step, finish_step=live.finish_step,
                                     prompt_digest=_digest(live.prompt))
            outcome.finish_reason = FINISH_STATUS.get(None if live.output is None else
                                                      live.output.outputs[0].finish_reason, "FINISHED_ABORTED")
            if live.output is not None:
                completion = live.output.outputs[0]
                outcome.output_tokens = list(completion.token_ids)
                outcome.logprobs = [lp[t].logprob for lp, t in zip(completion.logprobs, completion.token_ids, strict=True)]
                outcome.top_logprobs = [{str(t): v.logprob for t, v in lp.items()} for lp in completion.logprobs]
            result[rid] = outcome
        return result


class EngineSession:
    """Warm engines and the truth engine of one process; ``run`` is deterministic for a given scenario."""

    def __init__(self) -> None:
        self.engines: dict[EngineKey, Any] = {}
        self._recomputed: OrderedDict[str, SlotState] = OrderedDict()
        self._runs = 0

    def engine(self, key: EngineKey) -> Any:
        if key not in self.engines:
            self.engines[key] = build_engine(key)
        return self.engines[key]

    def close(self) -> None:
        self.engines.clear()
        self._recomputed.clear()

    def _tag(self) -> str:
        self._runs += 1
        return f"run{self._runs}"

    # ------------------------------------------------------------ recomputation on the truth engine

    def recompute(self, tokens: tuple[int, ...], positions: list[int]) -> dict[int, SlotState]:
        """The truth engine's state after exactly ``p`` of ``tokens``, for each ``p`` in positions (LRU-cached)."""
        from vllm import SamplingParams

        wanted = sorted({p for p in positions if _digest(tokens[:p]) not in self._recomputed})
        if wanted:
            engine = self.engine(EngineKey(None))
            scheduler = _scheduler(engine)
            group = _mamba_group(scheduler)
            engine_id = f"{self._tag()}/recompute"
            slot: list[int] = []
            scheduler.observer = lambda s, o: slot.extend(s.kv_cache_manager.get_blocks(i).blocks[group][0].block_id
                                                          for i in o.num_scheduled_tokens)
            scheduler.split = None
            engine.add_request(engine_id, {"prompt_token_ids": list(tokens[:wanted[-1]])},
                               SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
            done = 0
            try:
                for end in wanted:
                    while done < end:
                        step = min(end - done, ENGINE_MAX_BATCHED)
                        scheduler.max_num_scheduled_tokens = step
                        engine.step()
                        done += step
                    self._remember(_digest(tokens[:end]), engine_state.read_slot(engine, slot[-1]))
            finally:
                scheduler.observer = None
                scheduler.max_num_scheduled_tokens = ENGINE_MAX_BATCHED
            while engine.has_unfinished_requests():
                engine.step()
        return {p: self._recomputed[_digest(tokens[:p])] for p in positions}

    def _remember(self, key: str, state: SlotState) -> None:
        self._recomputed[key] = state
        self._recomputed.move_to_end(key)
        while len(self._recomputed) > 512:
            self._recomputed.popitem(last=False)

    # ------------------------------------------------------------ runs

    def run(self, scenario: Scenario, policy: Policy | None, canary: bool = False) -> RunResult:
        """Run ``scenario`` under ``policy`` (None: the truth run, prefix caching off) and audit its slots."""
        name = TRUTH if policy is None else policy.name
        result = RunResult(tier="engine", policy=name, scenario_id=scenario.scenario_id())
        reason = unsupported_reason(scenario)
        try:
            key = EngineKey(None) if policy is None else EngineKey.of(scenario.engine)
            if reason is None:
                engine = self.engine(key)
                reason = too_long_for(engine, scenario)
        except Unsupported as exc:
            reason = str(exc)
        if reason is not None:
            result.status = RunStatus.UNSUPPORTED
            result.notes.append(f"unsupported on this platform: {reason}")
            return result
        if policy is not None:
            engine.reset_prefix_cache()
        run = ScenarioRun(engine, scenario, policy, self._tag(), key.block_size)
        run.execute(self._inject_canary if canary else None)
        result.requests, result.steps, result.faults = run.outcomes(), run.steps, run.faults
        if policy is not None:
            self._audit(run, result)
            if scenario.engine.block_size != key.block_size:
                result.notes.append(f"engine block size B={key.block_size}: attention and Mamba blocks are one size "
                                    f"in align mode (scenario block_size {scenario.engine.block_size} not applied)")
        return result

    def _inject_canary(self, run: ScenarioRun, new: list[Hashed]) -> None:
        if not new or any(h.canary for h in run.hashed):
            return
        upcoming = run.upcoming_prompts()
        read_later = [h for h in new if any(p[: h.claimed] == list(h.tokens) for p in upcoming)]
        if not read_later and upcoming:
            return
        target = (read_later or new)[0]
        off = max(target.claimed - CANARY_OFFSET, 1)
        engine_state.write_slot(run.engine, target.block_id, self.recompute(target.tokens, [off])[off])
        target.canary = True
        run.notes.append(f"canary: slot {target.block_id} (hashed as state@{target.claimed}) holds state@{off}")

    def _audit(self, run: ScenarioRun, result: RunResult) -> None:
        result.hashed_mamba_blocks = len(run.hashed)
        worst = 0.0
        verdict_by_block: dict[int, str | None] = {}
        for h in run.hashed:
            assert h.state is not None
            expected = self.recompute(h.tokens, [h.claimed])[h.claimed]
            d = engine_state.distance(h.state, expected)
            if d <= STATE_TOLERANCE:
                worst = max(worst, d)
                verdict_by_block[h.block_id] = None
                continue
            held_tokens, held = self._explain(run, h)
            held = held or f"a state {d:.3f} (relative) away from state@{h.claimed}"
            verdict_by_block[h.block_id] = held
            result.poisoned.append(PoisonedSlot(step=h.step, block_id=h.block_id, request_id=h.request_id,
                                                column=h.column, claimed_tokens=h.claimed, held_tokens=held_tokens,
                                                held=f"{held} (distance {d:.3f}, tolerance {STATE_TOLERANCE})"))
        result.notes.append(f"state audit: {len(run.hashed)} hashed Mamba slot(s), {len(result.poisoned)} poisoned; "
                            f"largest distance among clean slots {worst:.4f} (tolerance {STATE_TOLERANCE})")
        result.notes.extend(run.notes)
        for rid, outcome in result.requests.items():
            block = run.live[rid].resume_block
            if block is not None and block in verdict_by_block:
                held = verdict_by_block[block]
                outcome.resume_state = held or f"state@{outcome.hit_tokens}"
                outcome.resume_state_ok = held is None

    def _explain(self, run: ScenarioRun, h: Hashed) -> tuple[int | None, str | None]:
        """The writer's chunk end inside the claimed block whose recomputed state the slot holds, if any."""
        assert h.state is not None and run.block_size
        low = h.claimed - run.block_size
        ends = sorted({c.start + c.num_tokens for s in run.steps for c in s.chunks
                       if c.request_id == h.request_id and low < c.start + c.num_tokens < h.claimed})
        if h.canary:
            ends.append(max(h.claimed - CANARY_OFFSET, 1))
        for pos, state in self.recompute(h.tokens, ends).items():
            if engine_state.distance(h.state, state) <= STATE_TOLERANCE:
                return pos, f"state@{pos}"
        return None, None
