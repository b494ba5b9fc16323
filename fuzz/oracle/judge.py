"""The correctness judge: poisoned slots (a hashed Mamba block not holding what its hash claims), bad resumes, outputs
differing between sides or off the exact computation (per request on the sim tier, else the truth run; none: side
``unknown``), executor faults. Invariant: sound runs with equal outputs matching the truth give no finding; the
findings are a function of the runs alone."""

from __future__ import annotations

from dataclasses import replace

from fuzz.model.result import Chunk, PoisonedSlot, RequestOutcome, RunResult, RunStatus, exact_outputs_differ
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.verdict import JudgeInput, OutputsDiffer

FIRST_AT_EQUAL_STEPS = {"poisoned-slot": 0, "bad-resume": 1}  # a poison before its consequences


def first_finding(findings: list[Divergence]) -> Divergence | None:
    """The finding at the earliest step (poison before its consequences at equal steps)."""
    return min(findings, key=lambda f: (f.step if f.step is not None else 1 << 30, FIRST_AT_EQUAL_STEPS.get(f.kind, 2)),
               default=None)


def _wrong_side(candidate_ok: bool, reference_ok: bool) -> str:
    if not candidate_ok and not reference_ok:
        return "both"
    if not candidate_ok:
        return "candidate"
    if not reference_ok:
        return "reference"
    return "unknown"


def crossing_chunk(run: RunResult, slot: PoisonedSlot) -> Chunk | None:
    """The last chunk up to the slot's audit step that ran past its hashed boundary (its missing stop left it stale)."""
    last = None
    for record in run.steps:
        if record.step > slot.step:
            break
        last = next((c for c in reversed(record.chunks)
                     if c.start < slot.claimed_tokens < c.start + c.num_tokens), last)
    return last


def own_findings(run: RunResult, side: str = "candidate") -> list[Divergence]:
    """What one run shows by itself, as findings of ``side``: poisoned slots, faults, bad resumes."""
    found = []
    for p in run.poisoned:
        crossing = crossing_chunk(run, p)
        found.append(Divergence("poisoned-slot", side, p.describe(), p.request_id, p.step, {
            "block_id": p.block_id, "column": p.column, "claimed_tokens": p.claimed_tokens,
            "held_tokens": p.held_tokens, "crossing_checkpoint": crossing and crossing.checkpoint_tokens}))
    found += [Divergence(f.kind, side, f"{f.kind}: {f.detail.splitlines()[0] if f.detail else ''}",
                         f.request_id, f.step, {"detail": f.detail, **({"stack": f.stack} if f.stack else {})})
              for f in run.faults]
    for rid, o in run.requests.items():
        if o.resumed and o.resume_state_ok is False:
            found.append(Divergence("bad-resume", side,
                                    f"request resumed at {o.hit_tokens} tokens from a state that is not its prefix",
                                    rid, o.first_step, {"hit_tokens": o.hit_tokens}))
    return found


def run_is_sound(run: RunResult) -> bool:
    """No fault, no poisoned slot, no request resumed from a state that is not its prefix."""
    return not run.faults and not run.poisoned and all(o.resume_state_ok is not False for o in run.requests.values())


def self_consistent(run: RunResult) -> bool:
    """One run alone shows nothing (no poison, fault, bad resume; outputs as expected_tokens): never the wrong side."""
    if run.poisoned or run.faults or run.status != RunStatus.OK:
        return False
    return all(
        o.expected_tokens is not None and o.resume_state_ok is not False and _matches_truth(o, None, exact_outputs_differ)
        for o in run.requests.values()
    )


def judge_correctness(runs: JudgeInput) -> list[Divergence]:
    """The correctness findings of ``runs`` (module docstring), both sides, in the order they were checked."""
    candidate, reference, truth, differ = runs.candidate, runs.reference, runs.truth, runs.outputs_differ
    findings = own_findings(candidate, "candidate") + own_findings(reference, "reference")
    for rid, c in candidate.requests.items():
        r = reference.requests.get(rid)
        if r is None:
            continue
        c_ok, r_ok = _matches_truth(c, truth, differ), _matches_truth(r, truth, differ)
        if _same_prompt(c, r) and differ(c, r):
            at = next((i for i, (a, b) in enumerate(zip(c.output_tokens, r.output_tokens, strict=False)) if a != b),
                      min(len(c.output_tokens), len(r.output_tokens)))
            side = "unknown" if None in (c_ok, r_ok) else _wrong_side(bool(c_ok), bool(r_ok))
            findings.append(Divergence(
                "output-divergence", side,
                f"request {rid} output differs from token {at} (resumed at {c.hit_tokens} vs {r.hit_tokens} tokens)",
                rid, c.finish_step, {"first_token": at, "candidate_hit": c.hit_tokens, "reference_hit": r.hit_tokens}))
        elif c_ok is False or r_ok is False:
            side = _wrong_side(c_ok is not False, r_ok is not False)
            findings.append(Divergence(
                "truth-divergence", side,
                f"request {rid} output differs from the exact computation of its own prompt", rid,
                (c if c_ok is False else r).finish_step))
    return findings


def _same_prompt(c: RequestOutcome, r: RequestOutcome) -> bool:
    """Both saw the same prompt (a follow-up of an aborted parent sees what the parent had produced by then)."""
    return c.prompt_digest is None or r.prompt_digest is None or c.prompt_digest == r.prompt_digest


def _matches_truth(o: RequestOutcome, truth: RunResult | None, differ: OutputsDiffer) -> bool | None:
    """Does the run's output match the exact computation of the prompt it saw? None: unknown."""
    if o.expected_tokens is not None:
        return not exact_outputs_differ(o, replace(o, output_tokens=o.expected_tokens, finish_reason=None))
    t = truth.requests.get(o.id) if truth is not None else None
    if t is None or not _same_prompt(o, t):
        return None
    return not differ(o, t)
