"""The efficiency oracle: what the candidate pays beyond the reference on one workload, in three costs over the
requests both saw with the same prompt: recomputed tokens (not cache hits), forward passes, steps from arrival to the
last prompt token (idle budget is evidence, not a cost). A finding exists only where the candidate pays more of one
cost and less of none, so equal runs give none; magnitudes (``amount``, ``relative``) are functions of the runs."""

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
    """The finding naming a set: the first kind in ``KINDS`` order, the largest of that kind."""
    return min(findings, key=lambda f: (KINDS.index(f.kind), -f.details["amount"]), default=None)


def magnitude(findings: list[Divergence], kind: str) -> tuple[int, float]:
    """The total amount and the largest relative magnitude of the findings of ``kind``."""
    of_kind = [f for f in findings if f.kind == kind]
    return sum(f.details["amount"] for f in of_kind), max((f.details["relative"] for f in of_kind), default=0.0)
