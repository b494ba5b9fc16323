"""The efficiency oracle: what the candidate makes the user pay beyond the reference, on the same workload.

A class of its own, never mixed with correctness: a split can keep every slot exact and still lose
prefix-cache hits (tokens recomputed: throughput and time to first token) or cut prompts into more
forward passes. vLLM's own regression test for #51113 sees such changes only because it pins exact
chunk sizes; this oracle compares what the two runs cost (``fuzz.model.cost``), not how they chunk.

Findings (each a ``Divergence`` on the candidate side, with its magnitude in ``details``:
``amount`` in the kind's unit and ``relative`` to what the reference paid or saved):
- ``lost-cache-hit``: a request saw the same prompt on both sides and resumed from fewer cached
  tokens under the candidate (unit: tokens recomputed);
- ``extra-forward-passes``: the candidate needed more non-empty scheduler steps (unit: passes);
- ``idle-budget``: the candidate left more of the step budgets unused while prefill work waited
  (unit: tokens).

Invariants: a finding exists only where the candidate pays strictly more than the reference (a
cheaper candidate is an improvement, not a finding), so equal runs (null runs) give none; the
magnitudes are functions of the two runs alone, hence deterministic.
"""

from __future__ import annotations

from fuzz.model.cost import RunCost
from fuzz.oracle.divergence import Divergence

KINDS = ("lost-cache-hit", "extra-forward-passes", "idle-budget")  # the order that names a finding (signature)


def judge_efficiency(candidate: RunCost, reference: RunCost) -> list[Divergence]:
    """The efficiency findings of ``candidate`` against ``reference`` (see the module docstring)."""
    found: list[Divergence] = []
    for rid, c in sorted(candidate.requests.items()):
        r = reference.requests.get(rid)
        if r is None or c.prompt_digest != r.prompt_digest or c.hit_tokens >= r.hit_tokens:
            continue
        lost = r.hit_tokens - c.hit_tokens
        found.append(Divergence(
            "lost-cache-hit", "candidate",
            f"request {rid} resumed from {c.hit_tokens} cached tokens where the reference resumed from "
            f"{r.hit_tokens}: {lost} tokens recomputed",
            rid, c.arrival_step, {"amount": lost, "relative": lost / r.hit_tokens, "unit": "tokens",
                                  "candidate": c.hit_tokens, "reference": r.hit_tokens}))
    if candidate.forward_passes > reference.forward_passes:
        extra = candidate.forward_passes - reference.forward_passes
        found.append(Divergence(
            "extra-forward-passes", "candidate",
            f"{candidate.forward_passes} forward passes where the reference needed {reference.forward_passes}",
            None, None, {"amount": extra, "relative": extra / max(reference.forward_passes, 1), "unit": "passes",
                         "candidate": candidate.forward_passes, "reference": reference.forward_passes}))
    if candidate.idle_budget > reference.idle_budget:
        extra = candidate.idle_budget - reference.idle_budget
        found.append(Divergence(
            "idle-budget", "candidate",
            f"{candidate.idle_budget} budget tokens left unused while prefill work waited, "
            f"where the reference left {reference.idle_budget}",
            None, None, {"amount": extra, "relative": extra / max(candidate.scheduled_tokens, 1), "unit": "tokens",
                         "candidate": candidate.idle_budget, "reference": reference.idle_budget}))
    return found


def headline(findings: list[Divergence]) -> Divergence | None:
    """The finding that names a set of efficiency findings: the first kind in ``KINDS`` order, the
    largest of that kind."""
    return min(findings, key=lambda f: (KINDS.index(f.kind), -f.details["amount"]), default=None)


def magnitude(findings: list[Divergence], kind: str) -> tuple[int, float]:
    """The total amount and the largest relative magnitude of the findings of ``kind``."""
    of_kind = [f for f in findings if f.kind == kind]
    return sum(f.details["amount"] for f in of_kind), max((f.details["relative"] for f in of_kind), default=0.0)
