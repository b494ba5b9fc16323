"""Kernel tier: replay a sim-tier schedule on real GDN kernels and compare against one-shot runs.

Invariants: slots are real tensors by physical block id (never written: zero); each step runs its copies, then
one varlen chunked call for prefills and one recurrent call for decode/verify, each chunk reading ``read_block``
and writing ``write_blocks`` as scheduled; divergence is ``max |o - o_ref| / max |o_ref|`` against one-shot runs;
poisoned slots and exported checkpoints are checked against one-shot states; vLLM only for ``run`` unscheduled."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from fuzz.model.deadline import DEFAULT_DEADLINE_S, DeadlineExceeded, deadline_seconds, run_deadline
from fuzz.model.result import Chunk, Fault, PoisonedSlot, RequestOutcome, RunResult, RunStatus
from fuzz.model.scenario import VOCAB_SIZE, Scenario
from fuzz.tiers import BaseExecutor
from workers.kernels.backends import Backend, get_backend
from workers.kernels.checkpoint import export_checkpoints
from workers.kernels.layer import DEFAULT_SHAPE, LayerShape, SeededLayer
from workers.kernels.schedule import ScheduleEntry, request_tokens

TIER = "kernels"
RECENT_SIMULATIONS = 8  # sim runs kept for canary_detected after run (a fuzz loop must not grow without bound)


@dataclass
class RequestDivergence:
    request_id: str
    hit_tokens: int
    positions: int  # outputs compared
    divergence: float  # max |o - o_ref| / max |o_ref|
    first_bad: int | None  # first position whose error exceeds the tolerance


@dataclass
class SlotCheck:
    """A slot the sim named poisoned, or a checkpoint the export kernel wrote, against one-shot states: ``error``
    from the claimed state (``claimed_tokens``), ``held_error`` from the sim's held one (``held_tokens``, or None)."""

    kind: str  # "poisoned" | "checkpoint"
    step: int
    block: int
    request_id: str
    column: int
    claimed_tokens: int
    error: float
    held_tokens: int | None = None
    held_error: float | None = None
    sim_held: str = ""


@dataclass
class KernelReport:
    """What one replay measured; ``run`` folds it into a RunResult."""

    backend: str
    tolerance: float
    requests: dict[str, RequestDivergence] = field(default_factory=dict)
    slots: list[SlotCheck] = field(default_factory=list)
    kernel_seconds: float = 0.0
    kernel_calls: int = 0
    state_bytes_moved: int = 0
    unsupported: str | None = None
    canary_block: int | None = None  # the slot the canary corrupted, if any
    hang_step: int | None = None  # the step the replay was in when the per-scenario deadline passed

    def diverging(self) -> list[RequestDivergence]:
        return [d for d in self.requests.values() if d.divergence > self.tolerance]

    def wrong_slots(self) -> list[SlotCheck]:
        return [c for c in self.slots if not c.error <= self.tolerance]


@dataclass
class _Feed:
    """One chunk's input token ids and which of its positions carry the request's true tokens."""

    chunk: Chunk
    ids: list[int]
    compare: list[bool]


def _wrong_token(full: list[int], position: int) -> int:
    """A deterministic token that differs from the true one: a rejected draft."""
    true = full[position] if position < len(full) else 0
    return (true + 1 + position % 997) % VOCAB_SIZE


def _feeds(result: RunResult, tokens: dict[str, list[int]]) -> dict[int, list[_Feed]]:
    """Per step, each chunk's inputs. A verify chunk's accepted drafts are read off the next chunk's start."""
    per_request: dict[str, list[tuple[int, Chunk]]] = {}
    for step in result.steps:
        for chunk in step.chunks:
            per_request.setdefault(chunk.request_id, []).append((step.step, chunk))
    feeds: dict[int, list[_Feed]] = {}
    for rid, chunks in per_request.items():
        full = tokens[rid]
        for i, (step, chunk) in enumerate(chunks):
            end = chunk.start + chunk.num_tokens
            true_upto = end
            if chunk.num_draft_tokens:
                nxt = chunks[i + 1][1].start if i + 1 < len(chunks) else end
                true_upto = min(end, max(chunk.start + 1, nxt))
            positions = range(chunk.start, end)
            compare = [p < true_upto and p < len(full) for p in positions]
            ids = [full[p] if ok else _wrong_token(full, p) for p, ok in zip(positions, compare, strict=True)]
            feeds.setdefault(step, []).append(_Feed(chunk, ids, compare))
    return feeds


def _split_copies(result: RunResult, block_size: int) -> dict[int, tuple[list[list[int]], list[list[int]]]]:
    """Per step, (copies before the kernels, copies after them): a copy is post-kernel iff its source is one of the
    step's verify writes and not that chunk's own preprocess copy (which exists iff the chunk's previous column, its
    last chunk's or ``(start - 1) // B``, differs from its ``state_column``, and lands in the block it reads)."""
    last: dict[str, Chunk] = {}
    split: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
    for step in result.steps:
        moved: set[str] = set()
        for chunk in step.chunks:
            before = last.get(chunk.request_id)
            running = before is not None and before.start + before.num_tokens >= chunk.start
            prev = before.state_column if running else (chunk.start - 1) // block_size
            if prev not in (-1, chunk.state_column):
                moved.add(chunk.request_id)
            last[chunk.request_id] = chunk
        verify = [c for c in step.chunks if c.num_draft_tokens]
        pre: list[list[int]] = []
        post: list[list[int]] = []
        for src, dst in step.copies:
            writer = next((c for c in verify if src in c.write_blocks), None)
            if writer is None or (writer.request_id in moved and dst == writer.read_block):
                pre.append([src, dst])
                moved.discard(writer.request_id if writer else "")
            else:
                post.append([src, dst])
        split[step.step] = (pre, post)
    return split


class SlotTable:
    """Physical Mamba block id -> (conv state, SSM state), float32 on the backend's device."""

    def __init__(self, shape: LayerShape, device: str):
        self.shape, self.device = shape, device
        self.slots: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def read(self, block: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        if block is None or block not in self.slots:
            return (
                torch.zeros(self.shape.conv_shape(1)[1:], device=self.device),
                torch.zeros(self.shape.ssm_shape(1)[1:], device=self.device),
            )
        return self.slots[block]

    def write(self, block: int, conv: torch.Tensor, ssm: torch.Tensor) -> None:
        self.slots[block] = (conv.clone(), ssm.clone())

    def copy(self, src: int, dst: int) -> None:
        self.write(dst, *self.read(src))


def unsupported_reason(scenario: Scenario, exports_checkpoints: bool) -> str | None:
    """Why this tier cannot judge ``scenario``, or None: it loads no KV connector's state, and writes internal
    prefill checkpoints only where ``exports_checkpoints`` (guessing would blame vLLM for what this tier omits)."""
    if any(r.external_tokens for r in scenario.requests):
        return ("external_tokens: the kernel tier loads no KV connector's state, so a request resumed from "
                "external tokens would read a slot nothing wrote")
    if scenario.engine.prefill_checkpoint_alignment is not None and not exports_checkpoints:
        return ("prefill_checkpoint_alignment: internal prefill checkpoints need Mamba2's export kernel, which "
                "runs with the triton-interpret backend only")
    return None


class KernelExecutor(BaseExecutor):
    """``run(scenario, policy) -> RunResult`` on real GDN kernels from the schedule: ``schedules`` (by scenario id and
    policy), else the sim tier's, kept for ``canary_detected``. ``canary_shift`` > 0 overwrites the first resumed
    request's slot with the state that many tokens short of its hit."""

    tier = TIER

    def __init__(
        self,
        backend: str | Backend = "auto",
        layer_seed: int = 0,
        shape: LayerShape = DEFAULT_SHAPE,
        schedules: list[ScheduleEntry] | None = None,
        canary_shift: int = 0,
    ):
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        self.layer = SeededLayer(shape, layer_seed)
        self.shape = shape
        self.device = self.backend.device
        self.params = {
            name: getattr(self.layer, name).to(self.device) for name in ("conv_weight", "conv_bias", "A_log", "dt_bias")
        }
        self.schedules = {(e.scenario.scenario_id(), e.result.policy): e for e in schedules or []}
        self._recent: dict[tuple[str, str], ScheduleEntry] = {}  # sim runs made here, oldest first
        self.canary_shift = canary_shift

    # ------------------------------------------------------------ entry points

    def run(self, scenario: Scenario, policy: Any, reference: Any = None) -> RunResult:
        return self.to_run_result(*self._replayed(scenario, policy.name, policy))

    def truth(self, scenario: Scenario) -> RunResult:
        """Every request without caching, with no outputs (output tokens are the schedule's inputs here)."""
        result = RunResult(tier=TIER, policy="truth", scenario_id=scenario.scenario_id())
        for request in scenario.requests:
            result.requests[request.id] = RequestOutcome(request.id, prompt_tokens=0)
        return result

    def canary_detected(self, scenario: Scenario) -> bool:
        """Whether a resume slot corrupted to one token less shows as a divergence; False when none resumes."""
        report = self.replay(self._entry(scenario, "vllm", None), canary_shift=1)
        return report.canary_block is not None and bool(report.diverging())

    def _entry(self, scenario: Scenario, name: str, policy: Any) -> ScheduleEntry:
        key = (scenario.scenario_id(), name)
        entry = self.schedules.get(key) or self._recent.get(key)
        if entry is None:
            if policy is None:
                from fuzz.model.policies import resolve_policy  # noqa: PLC0415 - only where schedules are made

                policy = resolve_policy(name)
            entry = self._recent[key] = simulate(scenario, policy)
            while len(self._recent) > RECENT_SIMULATIONS:
                self._recent.pop(next(iter(self._recent)))
        return entry

    def _replayed(self, scenario: Scenario, name: str, policy: Any) -> tuple[ScheduleEntry, KernelReport]:
        entry = self._entry(scenario, name, policy)
        return entry, self.replay(entry)

    def deadline(self) -> float:
        """Seconds one replay may take: ``--deadline``, else the backend's own, else the tier's default."""
        return deadline_seconds(self.backend.deadline_s or DEFAULT_DEADLINE_S)

    def unsupported(self, entry: ScheduleEntry) -> str | None:
        """Why this tier cannot replay ``entry`` on this backend, or None."""
        sim = entry.result
        if sim.status != RunStatus.OK:
            return f"sim tier status {sim.status!r}: {'; '.join(sim.notes)}"
        reason = unsupported_reason(entry.scenario, self.backend.exports_checkpoints)
        return None if reason is None else f"unsupported on the kernel tier: {reason}"

    def replay(self, entry: ScheduleEntry, canary_shift: int | None = None) -> KernelReport:
        report = KernelReport(self.backend.name, self.backend.tolerance)
        report.unsupported = self.unsupported(entry)
        if report.unsupported:
            return report
        sim = entry.result
        slots = SlotTable(self.shape, self.device)
        outputs: dict[str, list[tuple[list[int], torch.Tensor]]] = {}
        feeds = _feeds(sim, entry.tokens)
        copies = _split_copies(sim, entry.scenario.engine.mamba_block_size)
        canary = self._canary_target(entry, self.canary_shift if canary_shift is None else canary_shift)
        try:
            with run_deadline(self.deadline()):
                self._replay_steps(entry, slots, outputs, feeds, copies, canary, report)
        except DeadlineExceeded:
            return report  # report.hang_step names the step; outputs of an unfinished replay are not compared
        for rid, outs in outputs.items():
            report.requests[rid] = self._compare(rid, outs, entry, report)
        return report

    def _replay_steps(self, entry: ScheduleEntry, slots: SlotTable,
                      outputs: dict[str, list[tuple[list[int], torch.Tensor]]],
                      feeds: Any, copies: Any, canary: Any, report: KernelReport) -> None:
        named: dict[int, list[PoisonedSlot]] = {}  # checked on replays without a canary (which corrupts a slot)
        for slot in entry.result.poisoned if canary is None else ():
            named.setdefault(slot.step, []).append(slot)
        for step in entry.result.steps:
            report.hang_step = step.step
            pre, post = copies[step.step]
            for src, dst in pre:
                slots.copy(src, dst)
            step_feeds = feeds.get(step.step, [])
            if canary and any(f.chunk is canary[0] for f in step_feeds):
                report.canary_block = canary[0].read_block
                slots.write(canary[0].read_block, *canary[1])
                canary = None
            for chunked in (True, False):
                batch = [f for f in step_feeds if (f.chunk.num_tokens > 1 and not f.chunk.num_draft_tokens) == chunked]
                if batch and chunked:
                    self._run_prefills(batch, slots, outputs, report, entry, step.step)
                elif batch:
                    self._run_recurrent(batch, slots, outputs, report)
            for src, dst in post:
                slots.copy(src, dst)
            for slot in named.get(step.step, []):
                report.slots.append(self._check_poisoned(slot, slots, entry, report))
        report.hang_step = None

    # ------------------------------------------------------------ kernels

    def _timed(self, report: KernelReport, fn, *args, **kwargs):
        if self.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if self.device == "cuda":
            torch.cuda.synchronize()
        report.kernel_seconds += time.perf_counter() - t0
        report.kernel_calls += 1
        return out

    def _forward(self, ids: list[int], cu: list[int], conv0, ssm0, chunked: bool, report: KernelReport, all_states=False):
        """conv1d + GDN over a varlen batch; returns (x, conv outputs..., gdn outputs, final or per-token states)."""
        inputs = self.layer.inputs(ids)
        x, a, b = (t.to(self.device) for t in (inputs.x, inputs.a, inputs.b))
        cu_t = torch.tensor(cu, dtype=torch.int32)
        p = self.params
        y, conv1 = self._timed(report, self.backend.conv1d, x, p["conv_weight"], p["conv_bias"], conv0, cu_t)
        q, k, v = self.layer.split_qkv(y)
        args = (q, k, v, a, b, p["A_log"], p["dt_bias"], ssm0, cu_t)
        if chunked:
            o, ssm1 = self._timed(report, self.backend.gdn_chunked, *args)
        else:
            o, ssm1 = self._timed(report, self.backend.gdn_recurrent, *args, all_states=all_states)
        report.state_bytes_moved += (len(cu) - 1 + ssm1.shape[0]) * self.shape.state_bytes()
        return x, conv1, o, ssm1

    @staticmethod
    def _keep_outputs(f: _Feed, o: torch.Tensor, outputs: dict) -> None:
        keep = [j for j, ok in enumerate(f.compare) if ok]
        outputs.setdefault(f.chunk.request_id, []).append(([f.chunk.start + j for j in keep], o[keep]))

    def _run_prefills(self, batch: list[_Feed], slots: SlotTable, outputs: dict, report: KernelReport,
                      entry: ScheduleEntry, step: int) -> None:
        """One varlen chunked call for the step's prefills, each written into its last write block; a chunk with an
        internal checkpoint is cut there, its rest run from that state, and the export kernel writes the checkpoint."""
        cuts = [f.chunk.checkpoint_tokens - f.chunk.start if f.chunk.checkpoint_block is not None else len(f.ids)
                for f in batch]
        read = [slots.read(f.chunk.read_block) for f in batch]
        conv0, ssm0 = torch.stack([r[0] for r in read]), torch.stack([r[1] for r in read])
        _, conv1, o1, ssm1 = self._forward_pieces([f.ids[:c] for f, c in zip(batch, cuts, strict=True)],
                                                  conv0, ssm0, report)
        rest = [i for i, c in enumerate(cuts) if c < len(batch[i].ids)]
        finals = {i: (conv1[i], ssm1[i]) for i in range(len(batch))}
        outs = {i: [o] for i, o in enumerate(o1)}
        if rest:
            self._export(batch, cuts, ssm1, slots, entry, step, report)
            _, conv2, o2, ssm2 = self._forward_pieces([batch[i].ids[cuts[i]:] for i in rest], conv1[rest],
                                                      ssm1[rest], report)
            for j, i in enumerate(rest):
                finals[i] = (conv2[j], ssm2[j])
                outs[i].append(o2[j])
        for i, f in enumerate(batch):
            self._keep_outputs(f, torch.cat(outs[i]), outputs)
            for block in f.chunk.write_blocks[-1:]:
                slots.write(block, *finals[i])

    def _forward_pieces(self, pieces: list[list[int]], conv0, ssm0, report: KernelReport):
        """The chunked kernel over ``pieces`` as one varlen batch; outputs split per piece."""
        cu = [0]
        for piece in pieces:
            cu.append(cu[-1] + len(piece))
        x, conv1, o, ssm1 = self._forward([t for p in pieces for t in p], cu, conv0, ssm0, True, report)
        return x, conv1, [o[lo:hi] for lo, hi in zip(cu[:-1], cu[1:], strict=True)], ssm1

    def _export(self, batch: list[_Feed], cuts: list[int], states_at_cut: torch.Tensor, slots: SlotTable,
                entry: ScheduleEntry, step: int, report: KernelReport) -> None:
        """Mamba2's export kernel over the step's prefill batch; each checkpoint it writes is checked."""
        ids = [t for f in batch for t in f.ids]
        qsl = [0]
        for f in batch:
            qsl.append(qsl[-1] + len(f.ids))
        offsets = [c if f.chunk.checkpoint_block is not None else 0 for f, c in zip(batch, cuts, strict=True)]
        x = self.layer.inputs(ids).x.to(self.device)
        t0 = time.perf_counter()
        conv, ssm = export_checkpoints(x, qsl, offsets, states_at_cut, self.shape.conv_width - 1)
        report.kernel_seconds += time.perf_counter() - t0
        report.kernel_calls += 1
        for i, f in enumerate(batch):
            if offsets[i]:
                chunk = f.chunk
                slots.write(chunk.checkpoint_block, conv[i], ssm[i])
                error = self._distance(slots.read(chunk.checkpoint_block),
                                       entry.tokens[chunk.request_id][: chunk.checkpoint_tokens], report)
                block_size = entry.scenario.engine.mamba_block_size
                report.slots.append(SlotCheck("checkpoint", step, chunk.checkpoint_block, chunk.request_id,
                                              (chunk.checkpoint_tokens - 1) // block_size, chunk.checkpoint_tokens,
                                              error))

    def _run_recurrent(self, batch: list[_Feed], slots: SlotTable, outputs: dict, report: KernelReport):
        """One varlen recurrent call for decode and verify chunks, each position's state into its write block."""
        cu = [0]
        for f in batch:
            cu.append(cu[-1] + len(f.ids))
        read = [slots.read(f.chunk.read_block) for f in batch]
        conv0 = torch.stack([r[0] for r in read])
        ssm0 = torch.stack([r[1] for r in read])
        ids = [t for f in batch for t in f.ids]
        x, _, o, ssm1 = self._forward(ids, cu, conv0, ssm0, False, report, all_states=True)
        width = self.shape.conv_width
        for i, f in enumerate(batch):
            lo, hi = cu[i], cu[i + 1]
            self._keep_outputs(f, o[lo:hi], outputs)
            history = torch.cat([conv0[i], x[lo:hi].T], dim=1)  # conv state after position j: columns j+1 .. j+W-1
            for j, block in enumerate(f.chunk.write_blocks[: hi - lo]):
                slots.write(block, history[:, j + 1 : j + width], ssm1[lo + j])

    # ------------------------------------------------------------ slot checks

    def _distance(self, slot: tuple[torch.Tensor, torch.Tensor], tokens: list[int], report: KernelReport) -> float:
        """``max |x - ref| / max |ref|`` of a slot's conv and SSM states against the one-shot state of ``tokens``."""
        if tokens:
            _, conv, ssm = self.one_shot(tokens, report)
        else:
            conv, ssm = SlotTable(self.shape, self.device).read(None)
        return max(_relative(slot[0], conv), _relative(slot[1], ssm))

    def _check_poisoned(self, named: PoisonedSlot, slots: SlotTable, entry: ScheduleEntry,
                        report: KernelReport) -> SlotCheck:
        tokens = entry.tokens[named.request_id]
        held = slots.read(named.block_id)
        return SlotCheck(
            "poisoned", named.step, named.block_id, named.request_id, named.column, named.claimed_tokens,
            self._distance(held, tokens[: named.claimed_tokens], report), named.held_tokens,
            None if named.held_tokens is None else self._distance(held, tokens[: named.held_tokens], report),
            named.held)

    # ------------------------------------------------------------ oracle

    def one_shot(self, tokens: list[int], report: KernelReport) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Outputs and final (conv, SSM) state of ``tokens`` run in one chunk from the zero state."""
        zero_conv, zero_ssm = SlotTable(self.shape, self.device).read(None)
        _, conv1, o, ssm1 = self._forward(tokens, [0, len(tokens)], zero_conv[None], zero_ssm[None], True, report)
        return o, conv1[0], ssm1[0]

    def _compare(self, rid: str, outs: list[tuple[list[int], torch.Tensor]], entry: ScheduleEntry, report):
        """Later computations of a position (a recompute after preemption) replace earlier ones."""
        row: dict[int, tuple[int, int]] = {}
        for i, (positions, _) in enumerate(outs):
            row.update((p, (i, j)) for j, p in enumerate(positions))
        positions = sorted(row)
        truth, _, _ = self.one_shot(entry.tokens[rid][: positions[-1] + 1], report)
        got = torch.stack([outs[row[p][0]][1][row[p][1]] for p in positions])
        want = truth[positions]
        scale = want.abs().max().clamp_min(1e-12)
        err = ((got - want).abs().flatten(1).amax(1) / scale).cpu()
        bad = (err > self.backend.tolerance).nonzero()
        outcome = entry.result.requests.get(rid)
        return RequestDivergence(
            rid,
            outcome.hit_tokens if outcome else 0,
            len(positions),
            float(err.max()),
            positions[int(bad[0])] if len(bad) else None,
        )

    def _canary_target(self, entry: ScheduleEntry, shift: int) -> tuple[Chunk, tuple[torch.Tensor, torch.Tensor]] | None:
        if shift <= 0:
            return None
        for step in entry.result.steps:
            for chunk in step.chunks:
                outcome = entry.result.requests.get(chunk.request_id)
                if outcome and outcome.hit_tokens > 0 and chunk.start == outcome.hit_tokens and chunk.read_block is not None:
                    held = max(0, outcome.hit_tokens - shift)
                    tokens = entry.tokens[chunk.request_id][:held]
                    if not tokens:
                        return chunk, SlotTable(self.shape, self.device).read(None)
                    _, conv, ssm = self.one_shot(tokens, KernelReport(self.backend.name, self.backend.tolerance))
                    return chunk, (conv, ssm)
        return None

    # ------------------------------------------------------------ result

    def to_run_result(self, entry: ScheduleEntry, report: KernelReport) -> RunResult:
        """The sim run's schedule with the kernels' measurements: no output tokens, ``resume_state_ok`` says whether a
        resumed request stayed within tolerance, and each request beyond it is a ``divergence`` fault."""
        sim = entry.result
        result = RunResult(
            tier=TIER,
            policy=sim.policy,
            scenario_id=sim.scenario_id,
            requests=copy.deepcopy(sim.requests),
            steps=copy.deepcopy(sim.steps),
            hashed_mamba_blocks=sim.hashed_mamba_blocks,
        )
        for outcome in result.requests.values():  # the sim's symbolic observations are not this tier's
            outcome.output_tokens, outcome.expected_tokens = [], None
            outcome.resume_state, outcome.resume_state_ok = None, None
        result.notes.append(f"backend {report.backend}, tolerance {report.tolerance:g}")
        if report.hang_step is not None:
            result.faults.append(Fault(kind="hang", detail=f"the kernel replay passed its {self.deadline():g} s "
                                       f"deadline in step {report.hang_step}", step=report.hang_step))
            return result
        if report.unsupported:
            result.status = RunStatus.UNSUPPORTED
            result.notes.append(report.unsupported)
            return result
        for rid, d in sorted(report.requests.items()):
            outcome = result.requests.get(rid)
            if outcome is not None and outcome.resumed:
                outcome.resume_state_ok = d.divergence <= report.tolerance
            result.notes.append(f"divergence {rid} {d.divergence:.3g} over {d.positions} positions")
        for check in report.wrong_slots():
            if check.kind == "poisoned":
                near = "" if check.held_error is None else f", {check.held_error:.2g} from state@{check.held_tokens}"
                result.poisoned.append(PoisonedSlot(
                    check.step, check.block, check.request_id, check.column, check.claimed_tokens, check.held_tokens,
                    f"{check.sim_held} on the kernels ({check.error:.2g} from its claim{near})"))
            else:
                result.faults.append(Fault(
                    kind="divergence", step=check.step, request_id=check.request_id,
                    detail=f"the checkpoint the export kernel wrote into block {check.block} is {check.error:.3g} "
                    f"from state@{check.claimed_tokens} (tolerance {report.tolerance:g})"))
        for d in report.diverging():
            result.faults.append(
                Fault(
                    kind="divergence",
                    detail=f"outputs diverge from a one-shot run by {d.divergence:.3g} "
                    f"(tolerance {report.tolerance:g}) from position {d.first_bad}; hit_tokens {d.hit_tokens}",
                    request_id=d.request_id,
                )
            )
        return result


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))


def simulate(scenario, policy) -> ScheduleEntry:
    """The sim tier's run of ``scenario`` under ``policy`` (imports vLLM), as a schedule entry."""
    from workers.sim.executor import SimExecutor  # noqa: PLC0415 - vLLM only where a schedule must be made

    result = SimExecutor().run(scenario, policy)
    return ScheduleEntry(scenario, result, request_tokens(scenario, result))
