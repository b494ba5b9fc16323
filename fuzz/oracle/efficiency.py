"""The efficiency oracle: what the candidate makes the user pay beyond the reference, on the same workload.

A class of its own (``fuzz.oracle.classes.efficiency``), never mixed with correctness: a split can
keep every slot exact and still recompute tokens a cache hit would have spared, cut prompts into
more forward passes, or keep a request waiting longer for its first token. vLLM's own regression
test for #51113 sees such changes only because it pins exact chunk sizes; this oracle compares what
the two runs cost (``fuzz.model.cost``), not how they chunk.

What the user pays is three costs, each summed over the requests that saw the same prompt on both
sides (a multi-turn follow-up's prompt depends on its parent's output):

- *recomputed tokens*: prompt tokens computed rather than read from a cache hit (throughput, and
  time to first token);
- *forward passes*: non-empty scheduler steps;
- *steps to first token*: from a request's arrival to the step that computes its last prompt token.

The candidate *regresses* only where it pays more of at least one cost and less of none: a candidate
that trades one cost for another, or is cheaper, is not a finding. Budget a step leaves unused is
not a cost of its own (a candidate that resumes from more cached tokens has less to compute, so it
leaves more budget idle): reports show it as evidence.

Findings (each a ``Divergence`` on the candidate side, with its magnitude in ``details``: ``amount``
in the kind's unit and ``relative`` to what the reference paid): ``lost-cache-hit`` (per request,
tokens recomputed), ``extra-forward-passes`` (passes), ``later-first-token`` (per request, steps).

Invariants: equal runs (null runs) give no finding; a finding exists only where the candidate's
cost vector is worse than the reference's in one component and better in none; the magnitudes are
functions of the two runs alone, hence deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuzz.model.cost import RequestCost, RunCost
from fuzz.oracle.divergence import Divergence

KINDS = ("lost-cache-hit", "extra-forward-passes", "later-first-token")  # the order that names a finding


@dataclass(frozen=True)
class Costs:
    """The three costs of one run, over the requests both runs can compare (module docstring)."""

    recomputed_tokens: int
    forward_passes: int
    steps_to_first_token: int

    def worse(self, other: Costs) -> set[str]:
        """The costs where this run pays more than ``other``."""
        return {name for name in vars(self) if getattr(self, name) > getattr(other, name)}


def comparable(candidate: RunCost, reference: RunCost) -> list[tuple[RequestCost, RequestCost]]:
    """The requests both runs completed the prefill of, on the same prompt, in id order."""
    pairs = []
    for rid, c in sorted(candidate.requests.items()):
        r = reference.requests.get(rid)
        if r is not None and c.prompt_digest == r.prompt_digest and \
                c.steps_to_first_token is not None and r.steps_to_first_token is not None:
            pairs.append((c, r))
    return pairs


def costs(run: RunCost, requests: list[RequestCost]) -> Costs:
    return Costs(sum(r.prompt_tokens - r.hit_tokens for r in requests), run.forward_passes,
                 sum(r.steps_to_first_token or 0 for r in requests))


def judge_efficiency(candidate: RunCost, reference: RunCost) -> list[Divergence]:
    """The efficiency findings of ``candidate`` against ``reference`` (see the module docstring)."""
    pairs = comparable(candidate, reference)
    mine, theirs = costs(candidate, [c for c, _ in pairs]), costs(reference, [r for _, r in pairs])
    worse, better = mine.worse(theirs), theirs.worse(mine)
    if not worse or better:
        return []
    found: list[Divergence] = []
    if "recomputed_tokens" in worse:
        for c, r in pairs:
            if c.hit_tokens < r.hit_tokens:
                lost = r.hit_tokens - c.hit_tokens
                found.append(Divergence(
                    "lost-cache-hit", "candidate",
                    f"request {c.request_id} resumed from {c.hit_tokens} cached tokens where the reference resumed "
                    f"from {r.hit_tokens}: {lost} tokens recomputed",
                    c.request_id, c.arrival_step, {"amount": lost, "relative": lost / r.hit_tokens, "unit": "tokens",
                                                   "candidate": c.hit_tokens, "reference": r.hit_tokens}))
    if "forward_passes" in worse:
        extra = mine.forward_passes - theirs.forward_passes
        found.append(Divergence(
            "extra-forward-passes", "candidate",
            f"{mine.forward_passes} forward passes where the reference needed {theirs.forward_passes}",
            None, None, {"amount": extra, "relative": extra / max(theirs.forward_passes, 1), "unit": "passes",
                         "candidate": mine.forward_passes, "reference": theirs.forward_passes}))
    if "steps_to_first_token" in worse:
        for c, r in pairs:
            c_steps, r_steps = c.steps_to_first_token or 0, r.steps_to_first_token or 0
            if c_steps > r_steps:
                found.append(Divergence(
                    "later-first-token", "candidate",
                    f"request {c.request_id} waited {c_steps} steps for its first token where the reference "
                    f"waited {r_steps}", c.request_id, c.arrival_step,
                    {"amount": c_steps - r_steps, "relative": (c_steps - r_steps) / max(r_steps, 1), "unit": "steps",
                     "candidate": c_steps, "reference": r_steps}))
    return found


def headline(findings: list[Divergence]) -> Divergence | None:
    """The finding that names a set of efficiency findings: the first kind in ``KINDS`` order, the
    largest of that kind."""
    return min(findings, key=lambda f: (KINDS.index(f.kind), -f.details["amount"]), default=None)


def magnitude(findings: list[Divergence], kind: str) -> tuple[int, float]:
    """The total amount and the largest relative magnitude of the findings of ``kind``."""
    of_kind = [f for f in findings if f.kind == kind]
    return sum(f.details["amount"] for f in of_kind), max((f.details["relative"] for f in of_kind), default=0.0)
