"""The oracle: judge a candidate run against a reference run and the truth.

Four checks, each a Finding kind of its own:
(a) poison audit: a Mamba block hashed into the prefix cache holds a state other
    than the one its hash claims (``poisoned-slot``), on either side;
(b) differential: a request resumed from a state that is not exactly its
    prefix (``bad-resume``), or whose output tokens differ between candidate and
    reference (``output-divergence``);
(c) truth: the side whose outputs differ from the no-prefix-caching truth is the
    wrong one (without a truth run the side is ``unknown``);
(d) contracts and liveness: ``contract``, ``liveness``, ``exception``,
    ``engine-crash``, ``hang`` faults recorded by the executor.

Invariant: ``Verdict.status`` is ``clean`` only if no finding exists on either
side and both runs completed; a run the tier could not do is ``unsupported``,
never ``clean``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fuzz.result import UNSUPPORTED, RunResult

CLEAN = "clean"
DIVERGED = "diverged"
INCONCLUSIVE = "inconclusive"
UNSUPPORTED_VERDICT = "unsupported"


@dataclass
class Finding:
    kind: str
    side: str  # candidate | reference | both | unknown
    summary: str
    request_id: str | None = None
    step: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    status: str
    findings: list[Finding] = field(default_factory=list)
    resumed: int = 0  # requests that started from a cache hit in the candidate run
    poisoned: int = 0  # poisoned slots in the candidate run
    notes: list[str] = field(default_factory=list)

    @property
    def first(self) -> Finding | None:
        """The finding at the earliest step (poison before its consequences at equal steps)."""
        order = {"poisoned-slot": 0, "bad-resume": 1}
        return min(
            self.findings,
            key=lambda f: (f.step if f.step is not None else 1 << 30, order.get(f.kind, 2)),
            default=None,
        )

    @property
    def kind(self) -> str:
        first = self.first
        return first.summary if first else ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        first = self.first
        data["first"] = asdict(first) if first else None
        return data


def _wrong_side(candidate_ok: bool, reference_ok: bool) -> str:
    if not candidate_ok and not reference_ok:
        return "both"
    if not candidate_ok:
        return "candidate"
    if not reference_ok:
        return "reference"
    return "unknown"


def _side_findings(run: RunResult, side: str) -> list[Finding]:
    found = [
        Finding("poisoned-slot", side, p.describe(0), p.request_id, p.step,
                {"block_id": p.block_id, "column": p.column, "claimed_tokens": p.claimed_tokens,
                 "held_tokens": p.held_tokens})
        for p in run.poisoned
    ]
    found += [Finding(f.kind, side, f"{f.kind}: {f.detail.splitlines()[0] if f.detail else ''}",
                      f.request_id, f.step, {"detail": f.detail}) for f in run.faults]
    for rid, o in run.requests.items():
        if o.resumed and o.resume_state_ok is False:
            found.append(Finding("bad-resume", side,
                                 f"request resumed at {o.hit_tokens} tokens from a state that is not its prefix",
                                 rid, o.first_step, {"hit_tokens": o.hit_tokens}))
    return found


def judge(candidate: RunResult, reference: RunResult, truth: RunResult | None = None) -> Verdict:
    """A Verdict on what resumed-from-cache requests computed under candidate vs reference."""
    if UNSUPPORTED in (candidate.status, reference.status):
        return Verdict(UNSUPPORTED_VERDICT, notes=candidate.notes + reference.notes)
    findings = _side_findings(candidate, "candidate") + _side_findings(reference, "reference")
    for rid, c in candidate.requests.items():
        r = reference.requests.get(rid)
        if r is None or not _outputs_differ(c, r):
            continue
        expected = truth.requests[rid].output_tokens if truth and rid in truth.requests else None
        side = "unknown" if expected is None else _wrong_side(
            _agrees(c.output_tokens, expected), _agrees(r.output_tokens, expected))
        at = next((i for i, (a, b) in enumerate(zip(c.output_tokens, r.output_tokens, strict=False)) if a != b),
                  min(len(c.output_tokens), len(r.output_tokens)))
        findings.append(Finding(
            "output-divergence", side,
            f"request {rid} output differs from token {at} (resumed at {c.hit_tokens} vs {r.hit_tokens} tokens)",
            rid, c.finish_step, {"first_token": at, "candidate_hit": c.hit_tokens, "reference_hit": r.hit_tokens}))
    return Verdict(
        status=DIVERGED if findings else CLEAN,
        findings=findings,
        resumed=sum(1 for o in candidate.requests.values() if o.resumed),
        poisoned=len(candidate.poisoned),
        notes=candidate.notes,
    )


def _outputs_differ(c: Any, r: Any) -> bool:
    """Tokens differ where both produced one; lengths count only if neither was aborted mid-way."""
    n = min(len(c.output_tokens), len(r.output_tokens))
    if c.output_tokens[:n] != r.output_tokens[:n]:
        return True
    aborted = "FINISHED_ABORTED" in (c.finish_reason, r.finish_reason)
    return not aborted and len(c.output_tokens) != len(r.output_tokens)


def _agrees(tokens: list[int], expected: list[int]) -> bool:
    """A run agrees with the truth if it produced the truth's tokens (an aborted run: a prefix)."""
    return tokens == expected[: len(tokens)]
