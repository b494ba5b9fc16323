"""The simulated tier: vLLM's real Scheduler and KV-cache manager, a mirrored model runner.

``SimExecutor().run(scenario, policy)`` drives vLLM's own ``Scheduler``
(``add_request`` / ``schedule`` / ``update_from_output`` / ``update_draft_token_ids``,
in the order ``EngineCore.step`` and ``post_step`` call them, synchronous
scheduling) with the candidate split swapped in on that scheduler instance.
Between ``schedule`` and ``update_from_output`` the runner mirror
(``workers.sim.runner_mirror``) moves exact symbolic states between physical Mamba
slots as vLLM's model runner would, and samples tokens from them.

After every step the poison audit runs: every Mamba block in the pool that
carries a block hash must hold exactly the state of the tokens its hash claims
(the first ``block_hash_num_tokens`` tokens of the prefix the hash was computed
from). A violation becomes a :class:`~fuzz.model.result.PoisonedSlot`.

Deterministic: no wall clock, no global RNG; a fresh scheduler per run (whose block pool may be
an earlier run's, reset to a new pool's exact state: ``workers.sim.block_pools``).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import CheckoutMismatch, unfit_for_installed
from fuzz.model.deadline import DeadlineExceeded, deadline_seconds, run_deadline
from fuzz.model.decision import DisagreementProbe
from fuzz.model.drive import Drive
from fuzz.model.knobs import unsupported_reason
from fuzz.model.policies import CandidateGone, Policy, Rewind, contract_checked
from fuzz.model.result import Fault, PoisonedSlot, RequestOutcome, RunResult, RunStatus, StepRecord, exception_stack
from fuzz.model.scenario import (
    MAX_CONTEXT,
    VOCAB_SIZE,
    Scenario,
    own_prompt_length,
    prompt_tokens,
    required_kv_blocks,
)
from fuzz.model.scenario import Request as ScenarioRequest
from fuzz.sandbox.tape import TapedRun
from fuzz.tiers import BaseExecutor
from workers.sim import model_info
from workers.sim.block_hashes import memoized_block_hasher
from workers.sim.branch import BranchRaised, BranchRunner
from workers.sim.fidelity import check_mirror_fidelity
from workers.sim.hash_index import MambaHashIndex
from workers.sim.runner_mirror import RunnerMirror, StepOutcome, StepWork
from workers.sim.scheduler import build_scheduler, default_num_blocks, release_scheduler, scheduler_configs
from workers.sim.symbolic import State, greedy_continuation, next_token

MAMBA_GROUP = 1


@dataclass
class Claim:
    """A hash a Mamba block carries, as first seen: what state its slot must hold from now on.

    ``request_id`` is the request that last wrote the block's slot (whose split put it there), else
    the first request whose prompt has that prefix."""

    block_hash: Any
    request_id: str
    column: int
    tokens: tuple[int, ...]
    reported: bool = False
    verified: State | None = None  # the slot value last found to hold exactly ``tokens``


@dataclass
class _Run:
    scenario: Scenario
    scheduler: Any
    mirror: RunnerMirror
    result: RunResult
    drive: Drive  # arrivals, aborts, liveness
    vllm_requests: dict[str, Any] = field(default_factory=dict)
    claims: dict[tuple[int, Any], Claim] = field(default_factory=dict)  # (block id, hash) -> claim
    accept_cursor: dict[str, int] = field(default_factory=dict)
    hasher: Callable[[Any], list[Any]] | None = None
    hash_index: MambaHashIndex | None = None  # the pool's Mamba hash entries
    specs: dict[str, Any] = field(default_factory=dict)  # request id -> the scenario's Request
    prefixes: dict[Any, tuple[str, int]] = field(default_factory=dict)  # BlockHash -> preimage (request, tokens)
    indexed: dict[str, int] = field(default_factory=dict)  # request -> block hashes indexed
    step: int = 0  # the scheduler step in progress (a deadline names it)
    branch: bool = False  # the scheduler is a whole branch's, in its process (``workers.sim.branch``)


class SimExecutor(BaseExecutor):
    """``run(scenario, policy) -> RunResult`` on the real scheduler; ``truth(scenario)`` without caching."""

    tier = "sim"

    def __init__(self, max_steps: int | None = None, audits: bool = True):
        self.max_steps, self.audits = max_steps, audits  # no audit: a tape child's run, judged elsewhere
        self.model_infos = ""  # a tape child's: the deciding process's model-info cache, seeded from per run
        check_mirror_fidelity()  # warns, or (GDNFUZZ_STRICT_FIDELITY=1) refuses, naming what changed
        self._branches: dict[str, BranchRunner] = {}  # whole-branch candidates, one process per checkout

    # ------------------------------------------------------------ public

    def run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult:
        """``scenario`` under ``policy``; with a ``reference`` (not a whole branch, nor equal to the policy),
        the run's first split decision where the two disagree is recorded (``fuzz.model.decision``). A sandboxed
        policy's run is answered from its child's tape (``fuzz.sandbox.tape``), where the tape matches the run."""
        if self.model_infos:
            model_info.seed(self.model_infos)
        taped = TapedRun.of(policy, scenario, self.max_steps, _model_infos)
        if taped is None:
            return self._run(scenario, policy, reference)
        if unsupported_reason(scenario.engine) is None:  # the child builds these configs: their classes inspected
            model_info.warm(scenario.engine, _pool_blocks(scenario), any(r.external_tokens for r in scenario.requests))
        return taped.result(lambda split: self._run(scenario, replace(policy, split=split), reference))

    def _run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult:
        probe = None
        if reference is not None and reference.checkout is None and policy.checkout is None and reference != policy:
            probe = DisagreementProbe(policy.split, reference.split)
            policy = replace(policy, split=probe.split)
        knobs = scenario.engine
        reason = unsupported_reason(knobs)
        if reason is not None:  # a knob the installed vLLM lacks: not this vLLM's configuration to judge
            return RunResult(tier=self.tier, policy=policy.name, scenario_id=scenario.scenario_id(),
                             status=RunStatus.UNSUPPORTED, notes=[f"unsupported by the installed vLLM: {reason}"])
        num_blocks, limit = _pool_blocks(scenario), self._step_limit(scenario)
        if knobs.num_kv_blocks is not None and knobs.num_kv_blocks < required_kv_blocks(scenario):
            raise ConfigRejected(
                f"engine.num_kv_blocks {knobs.num_kv_blocks} cannot hold the scenario's largest request "
                f"(needs {required_kv_blocks(scenario)}); vLLM refuses a KV cache smaller than one request")
        external = {r.id: r.external_tokens for r in scenario.requests if r.external_tokens}
        result = RunResult(tier=self.tier, policy=policy.name, scenario_id=scenario.scenario_id())
        if knobs.spec_decode == "eagle":
            result.notes.append("eagle is configured as the target's MTP head (same EAGLE-family split)")
        def violation(request: Any, detail: str) -> None:
            result.faults.append(Fault(kind="contract", detail=detail, step=len(result.steps),
                                       request_id=request.request_id))

        if policy.checkout is not None:  # whole-branch mode: the checkout's scheduler, in its own process
            runner = self._branches.setdefault(policy.checkout, BranchRunner(policy.checkout))
            try:
                scheduler: Any = runner.scheduler(scenario, num_blocks, external, violation)
            except (CandidateGone, BranchRaised) as exc:  # its process ended, hung, or its scheduler raised
                kind, detail = (exc.kind, exc.detail) if isinstance(exc, CandidateGone) else \
                    ("exception", f"{type(exc).__name__}: {exc}")
                result.faults.append(Fault(kind=kind, detail=detail, step=0))
                return result
            hasher, hash_index = None, scheduler
            # the model runner stays the installed vLLM's: its mirror reads the installed configs
            vllm_config, kv_cache_config, _ = scheduler_configs(knobs, num_blocks, bool(external))
        else:
            scheduler = build_scheduler(knobs, num_blocks, kv_connector=bool(external))
            for rid, tokens in external.items():
                scheduler.connector.hold(rid, tokens)
            scheduler._mamba_block_aligned_split = types.MethodType(contract_checked(policy.split, violation),
                                                                    scheduler)
            hasher, hash_index = _hasher(scheduler), MambaHashIndex(scheduler.kv_cache_manager.block_pool, MAMBA_GROUP)
            vllm_config, kv_cache_config = scheduler.vllm_config, scheduler.kv_cache_config
        run = _Run(
            scenario=scenario,
            scheduler=scheduler,
            mirror=RunnerMirror(vllm_config, kv_cache_config, MAMBA_GROUP, num_blocks),
            result=result,
            drive=Drive(scenario, limit),
            specs={r.id: r for r in scenario.requests},
            hasher=hasher,
            hash_index=hash_index,
            branch=policy.checkout is not None,
        )
        try:
            with run_deadline():
                self._loop(run)
        except Rewind:
            if not run.branch:
                release_scheduler(scheduler)
            raise
        except DeadlineExceeded:
            result.faults.append(Fault(kind="hang", detail=f"the run passed its {deadline_seconds():g} s deadline "
                                       f"in step {run.step}", step=run.step))
        except CheckoutMismatch:
            raise
        except CandidateGone as exc:  # a sandboxed split's process ended or hung: a fault of the run, this step
            result.faults.append(Fault(kind=exc.kind, detail=exc.detail, step=run.step))
        except Exception as exc:  # anything vLLM raises mid-run is a finding, not a crash of ours
            unfit = unfit_for_installed(exc)  # a checkout's code reaching for what the installed vLLM lacks
            if unfit is not None:
                raise CheckoutMismatch(unfit) from None
            result.faults.append(Fault(kind="exception", detail=f"{type(exc).__name__}: {exc}",
                                       step=len(result.steps), stack=exception_stack(exc)))
        self._collect(run)
        if not run.branch:
            release_scheduler(scheduler)
        if probe is not None:
            result.disagreement = probe.disagreement(result)
        return result

    def _step_limit(self, scenario: Scenario) -> int:
        """The steps a run may take before its requests count as never finishing (liveness)."""
        return self.max_steps or (max(r.arrival_step for r in scenario.requests) + 2 * _total_tokens(scenario) + 64)

    def configuration(self, scenario: Scenario) -> dict[str, Any]:
        """What this tier builds for ``scenario``, as plain data: the model's ``config.json``, the Mamba state's
        shapes, the KV pool's blocks and the step limit (``gdnfuzz export-test`` writes them into a test)."""
        from workers.tiny_model import TINY_CONFIG, gdn_state_shapes

        return {"model_config": dict(TINY_CONFIG), "state_shapes": [list(s) for s in gdn_state_shapes(TINY_CONFIG)],
                "num_kv_blocks": _pool_blocks(scenario), "max_steps": self._step_limit(scenario),
                "max_model_len": MAX_CONTEXT}

    def close(self) -> None:
        """Stop the whole-branch candidate processes (restarted on the next run)."""
        for runner in self._branches.values():
            runner.close()
        self._branches.clear()

    def truth(self, scenario: Scenario) -> RunResult:
        """What every request computes with exact states (prefix caching off)."""
        result = RunResult(tier=self.tier, policy="truth", scenario_id=scenario.scenario_id())
        outputs: dict[str, list[int]] = {}
        for r in scenario.requests:
            prompt = prompt_tokens(scenario, r, outputs)
            outputs[r.id] = greedy_continuation(State(tuple(prompt)), r.max_tokens)
            result.requests[r.id] = RequestOutcome(id=r.id, prompt_tokens=len(prompt),
                                                   prompt_digest=State(tuple(prompt)).fingerprint(),
                                                   output_tokens=list(outputs[r.id]))
        return result

    # ------------------------------------------------------------ the loop

    def _loop(self, run: _Run) -> None:
        """``EngineCore.step``'s order, step by step, with the scenario's arrivals, aborts and liveness
        rule from its ``Drive`` (as on the engine tier)."""
        from vllm.v1.request import RequestStatus

        drive = run.drive
        for step in range(drive.limit):
            run.step = step
            self._admit(run, drive.arrivals(step))
            for rid in drive.aborts(step):
                run.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
            if not drive.unfinished and not run.scheduler.has_requests():
                return
            budget = run.scenario.engine.budget_at(step)
            run.scheduler.max_num_scheduled_tokens = budget
            output = run.scheduler.schedule()
            if not run.branch:
                self._note_junctions(run, output.num_scheduled_tokens)
            record = StepRecord(step=step, budget=budget)
            run.result.steps.append(record)
            model_output, drafts = self._execute(run, output, record)
            run.scheduler.update_from_output(output, model_output)
            if drafts is not None:
                run.scheduler.update_draft_token_ids(drafts)
            if self.audits:
                self._audit(run, step)
            self._note_finished(run, step)
            fault = drive.liveness(step, scheduled=output.total_num_scheduled_tokens > 0)
            if fault is not None:
                run.result.faults.append(fault)
                return

    def _note_junctions(self, run: _Run, scheduled: dict[str, int]) -> None:
        """Each scheduled request's shared-prefix junction, once per value (what ``fuzz.search.aim`` aims at)."""
        for rid in scheduled:
            junction = run.vllm_requests[rid].shared_prefix_boundary
            seen = run.result.requests[rid].junctions
            if junction and junction not in seen:
                seen.append(junction)

    def _admit(self, run: _Run, arrivals: list[ScenarioRequest]) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        if not arrivals:
            return
        said = {rid: req.output_token_ids for rid, req in run.vllm_requests.items()}
        for spec in arrivals:
            prompt = prompt_tokens(run.scenario, spec, said)
            if run.branch:
                request = run.scheduler.admit(spec.id, prompt, spec.max_tokens)
            else:
                params = SamplingParams(max_tokens=spec.max_tokens, temperature=0.0, ignore_eos=True)
                request = Request(spec.id, prompt, params, None, block_hasher=run.hasher)
                run.scheduler.add_request(request)
            run.vllm_requests[spec.id] = request
            exact = State(tuple(prompt))
            run.result.requests[spec.id] = RequestOutcome(
                id=spec.id, prompt_tokens=len(prompt), prompt_digest=exact.fingerprint(),
                expected_tokens=greedy_continuation(exact, spec.max_tokens))

    def _execute(self, run: _Run, output: Any, record: StepRecord) -> tuple[Any, Any]:
        """The model runner's part of a step: block tables, states, sampling, drafts."""
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

        mirror = run.mirror
        for rid in output.finished_req_ids:
            mirror.drop(rid)
        block_copies = mirror.zero_and_copy(
            list(output.new_block_ids_to_zero or ()),
            [(c.src_block_id, c.dst_block_id) for c in output.kv_cache_block_copies or ()],
        )
        loaded = {load.request_id for load in getattr(output.kv_connector_metadata, "loads", ())}
        for new in output.scheduled_new_reqs:
            mirror.add(new.req_id, new.block_ids[MAMBA_GROUP], new.num_computed_tokens)
            self._load_external(run, new.req_id, loaded)
            self._note_resume(run, new.req_id, new.num_computed_tokens, first=True)
        cached = output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            blocks = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids:
                mirror.add(rid, blocks[MAMBA_GROUP] if blocks else [], cached.num_computed_tokens[i])
                self._load_external(run, rid, loaded)
                self._note_resume(run, rid, cached.num_computed_tokens[i], first=False)
            else:
                mirror.extend(rid, blocks[MAMBA_GROUP] if blocks else None, cached.num_computed_tokens[i])

        work: list[StepWork] = []
        for rid, n in output.num_scheduled_tokens.items():
            request = run.vllm_requests[rid]
            # A new request admitted one token short of its end is padded to 1 + num_spec rows with
            # placeholder drafts (-1); the runner can never accept one, nor can token 0 be sampled.
            drafts = [max(t, 0) for t in output.scheduled_spec_decode_tokens.get(rid, ())]
            start = mirror.requests[rid].num_computed
            known = request.all_token_ids[start : start + n - len(drafts)]
            work.append(StepWork(rid, list(known) + drafts, len(drafts),
                                 samples=start + n - len(drafts) >= request.num_tokens))
        outcome = mirror.step(work, output, block_copies) if work else StepOutcome(copies=block_copies)
        record.chunks = outcome.chunks
        record.copies = outcome.copies

        req_ids = list(output.num_scheduled_tokens)
        model_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[outcome.sampled[rid] for rid in req_ids],
        )
        num_spec = run.scenario.engine.num_spec_tokens
        if not num_spec:
            return model_output, None
        draft_ids = [rid for rid in req_ids if outcome.sampled[rid]]
        drafts = [self._drafts(run, rid, outcome.running[rid], outcome.sampled[rid][-1], num_spec)
                  for rid in draft_ids]
        return model_output, DraftTokenIds(draft_ids, drafts)

    @staticmethod
    def _load_external(run: _Run, rid: str, loaded: set[str]) -> None:
        """The connector's load for a request admitted (or resumed after preemption) this step."""
        if rid in loaded:
            computed = run.mirror.requests[rid].num_computed
            run.mirror.load_external(rid, tuple(run.vllm_requests[rid].all_token_ids[:computed]))

    def _drafts(self, run: _Run, rid: str, running: State, last: int, count: int) -> list[int]:
        """Draft tokens of which exactly the scenario's accept count are what the target samples."""
        pattern = run.specs[rid].accept
        cursor = run.accept_cursor.get(rid, 0)
        run.accept_cursor[rid] = cursor + 1
        correct = min(pattern[cursor % len(pattern)], count) if pattern else count
        drafts: list[int] = []
        state = running.extend((last,))
        for i in range(count):
            token = next_token(state)
            if i >= correct:
                token = token % (VOCAB_SIZE - 1) + 1  # any other valid token: a rejected draft
            drafts.append(token)
            state = state.extend((token,))
        return drafts

    def _note_resume(self, run: _Run, rid: str, num_computed: int, first: bool) -> None:
        outcome = run.result.requests[rid]
        if first:
            outcome.first_step = len(run.result.steps) - 1
        if num_computed <= 0:
            return
        state = run.mirror.resume_state(rid)
        tokens = run.vllm_requests[rid].all_token_ids[:num_computed]
        ok = state.tokens == tuple(tokens)
        if first or outcome.hit_tokens == 0:
            outcome.hit_tokens = num_computed
            outcome.resume_state = state.fingerprint()
            outcome.resume_state_ok = ok
        elif not ok:
            outcome.resume_state_ok = False

    # ------------------------------------------------------------ the audit

    def _audit(self, run: _Run, step: int) -> None:
        """Every hash a Mamba block carries claims a state; the block's slot must hold exactly it.

        The pool's hash index (what ``get_cached_block`` looks up) is audited, not the live
        requests' block tables: a block stays hashed, and can be hit, after the request that cached
        it has finished; and a block registered under several hashes is audited for each. Its Mamba
        entries are read from ``workers.sim.hash_index.MambaHashIndex``, which keeps them exactly as a
        scan of the index would find them without scanning the other groups' entries.
        Incremental: the mirror replaces a slot's ``State`` whenever it writes the slot (states are
        immutable), so a claim whose slot still holds the very object last verified is not compared
        again; only new claims and rewritten slots cost a comparison."""
        from vllm.v1.core.kv_cache_utils import get_block_hash

        entries = run.hash_index.current()  # first: a whole branch's requests are brought up to date with it
        self._index_prefixes(run)
        block_size = run.scenario.engine.mamba_block_size
        live: set[tuple[int, Any]] = set()
        for key, blocks in entries.items():
            for block in blocks:
                pair = (block.block_id, key)
                live.add(pair)
                claim = run.claims.get(pair)
                if claim is None:
                    rid, length = run.prefixes[get_block_hash(key)]
                    owner = run.mirror.writers.get(block.block_id, rid)
                    tokens = tuple(run.vllm_requests[rid].all_token_ids[:length])
                    claim = run.claims[pair] = Claim(key, owner, (length - 1) // block_size, tokens)
                elif claim.reported:
                    continue
                held = run.mirror.slot(block.block_id)
                if held is claim.verified:
                    continue
                if held.tokens == claim.tokens:
                    claim.verified = held
                    continue
                claim.reported = True
                held_tokens, text = held.describe_against(claim.tokens)
                run.result.poisoned.append(PoisonedSlot(
                    step=step, block_id=block.block_id, request_id=claim.request_id, column=claim.column,
                    claimed_tokens=len(claim.tokens), held_tokens=held_tokens, held=text))
        if len(live) != len(run.claims):
            for gone in set(run.claims) - live:
                del run.claims[gone]  # evicted: the slot is free to hold anything
        run.result.hashed_mamba_blocks = max(run.result.hashed_mamba_blocks, len(run.claims))

    @staticmethod
    def _index_prefixes(run: _Run) -> None:
        """Map every block hash a request computed to its preimage: that request's first tokens (the
        request and the count; a request's token ids only ever grow, so the prefix is read when needed)."""
        size = run.scheduler.hash_block_size
        for rid, request in run.vllm_requests.items():
            hashes = request.block_hashes
            done = run.indexed.get(rid, 0)
            if done == len(hashes):
                continue
            for i in range(done, len(hashes)):
                run.prefixes.setdefault(hashes[i], (rid, (i + 1) * size))
            run.indexed[rid] = len(hashes)

    @staticmethod
    def _note_finished(run: _Run, step: int) -> None:
        for rid, request in run.vllm_requests.items():
            outcome = run.result.requests[rid]
            if outcome.finish_step is None and request.is_finished():
                outcome.finish_step = step
                outcome.finish_reason = str(request.status)
                run.drive.finish(rid, step)

    @staticmethod
    def _collect(run: _Run) -> None:
        for rid, request in run.vllm_requests.items():
            run.result.requests[rid].output_tokens = list(request.output_token_ids)


@functools.cache
def _model_infos() -> str:
    return str(model_info.cache_dir())


def _total_tokens(scenario: Scenario) -> int:
    return sum(own_prompt_length(scenario, r) + r.max_tokens for r in scenario.requests)


def _pool_blocks(scenario: Scenario) -> int:
    """The KV pool: the scenario's, else one large enough that nothing is evicted."""
    return scenario.engine.num_kv_blocks or default_num_blocks(scenario.engine, 2 * _total_tokens(scenario))


def _hasher(scheduler: Any) -> Callable[[Any], list[Any]]:
    """vLLM's own request block hasher at the scheduler's hash block size (as EngineCore builds it),
    memoized across runs (``workers.sim.block_hashes``)."""
    return memoized_block_hasher(scheduler.hash_block_size, scheduler.cache_config.prefix_caching_hash_algo)
