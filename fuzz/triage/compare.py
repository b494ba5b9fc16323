"""A/B cost comparison of two split policies over scenarios: what a change costs the user.

Only costs are compared (correctness is ``gdnfuzz replay``'s); a scenario a side cannot run is counted and left out of
every figure, so both columns cover the same requests."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.cost import RequestCost, RunCost, run_cost
from fuzz.model.policies import Policy
from fuzz.model.result import RunStatus
from fuzz.model.scenario import Scenario
from fuzz.tiers import executor_for


@dataclass(frozen=True)
class Comparison:
    """One scenario's costs under both policies; ``skipped`` says why there are none."""

    name: str
    candidate: RunCost | None
    reference: RunCost | None
    skipped: str | None = None


def compare_costs(loaded: Iterable[tuple[str, Scenario]], candidate: Policy, reference: Policy,
                  tier: str = "sim") -> list[Comparison]:
    executor = executor_for(tier)
    out: list[Comparison] = []
    for name, scenario in loaded:
        try:
            runs = [executor.run(scenario, policy) for policy in (candidate, reference)]
        except ConfigRejected as exc:
            out.append(Comparison(name, None, None, f"rejected: {exc}"))
            continue
        unrunnable = next((r for r in runs if r.status != RunStatus.OK or r.faults), None)
        if unrunnable is not None:
            why = unrunnable.faults[0].kind if unrunnable.faults else "; ".join(unrunnable.notes) or "unsupported"
            out.append(Comparison(name, None, None, f"{unrunnable.policy}: {why}"))
            continue
        out.append(Comparison(name, run_cost(scenario, runs[0]), run_cost(scenario, runs[1])))
    return out


def _distribution(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(values), "min": ordered[0], "p50": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], "max": ordered[-1],
            "mean": statistics.fmean(ordered)}


RUN_FIGURES: dict[str, Callable[[RunCost], float]] = {
    "cache-hit tokens": lambda c: c.hit_tokens,
    "forward passes": lambda c: c.forward_passes,
    "prefill chunks": lambda c: c.prefill_chunks,
    "idle budget (tokens)": lambda c: c.idle_budget,
    "requests resumed": lambda c: c.resumed,
    "Mamba states cached": lambda c: c.states_cached,
    "step wall seconds (engine)": lambda c: round(sum(c.step_seconds), 3),
}
REQUEST_FIGURES: dict[str, Callable[[RequestCost], float | None]] = {
    "hit tokens": lambda r: r.hit_tokens,
    "prefill chunks": lambda r: r.prefill_chunks,
    "steps to first token": lambda r: r.steps_to_first_token,
}


def summarize(comparisons: list[Comparison]) -> dict[str, Any]:
    """Totals, per-scenario and per-request distributions, and how often each side paid more."""
    done = [c for c in comparisons if c.candidate is not None and c.reference is not None]
    sides = {"candidate": [c.candidate for c in done], "reference": [c.reference for c in done]}
    totals = {name: {side: sum(fig(cost) for cost in costs) for side, costs in sides.items()}
              for name, fig in RUN_FIGURES.items()}
    per_scenario = {name: {side: _distribution([fig(cost) for cost in costs]) for side, costs in sides.items()}
                    for name, fig in RUN_FIGURES.items()}
    per_request: dict[str, dict[str, dict[str, float]]] = {}
    for name, fig in REQUEST_FIGURES.items():
        per_request[name] = {}
        for side, costs in sides.items():
            values = [fig(r) for cost in costs for r in cost.requests.values()]
            per_request[name][side] = _distribution([v for v in values if v is not None])
    worse = {
        "lost cache-hit tokens": sum(c.candidate.hit_tokens < c.reference.hit_tokens for c in done),
        "more forward passes": sum(c.candidate.forward_passes > c.reference.forward_passes for c in done),
        "more idle budget": sum(c.candidate.idle_budget > c.reference.idle_budget for c in done),
    }
    better = {
        "more cache-hit tokens": sum(c.candidate.hit_tokens > c.reference.hit_tokens for c in done),
        "fewer forward passes": sum(c.candidate.forward_passes < c.reference.forward_passes for c in done),
        "less idle budget": sum(c.candidate.idle_budget < c.reference.idle_budget for c in done),
    }
    return {"scenarios": len(comparisons), "compared": len(done),
            "skipped": {c.name: c.skipped for c in comparisons if c.skipped},
            "totals": totals, "per_scenario": per_scenario, "per_request": per_request,
            "candidate_pays_more": worse, "candidate_pays_less": better,
            "per_scenario_costs": [{"name": c.name, **{side: {"hit_tokens": cost.hit_tokens,
                                                                            "forward_passes": cost.forward_passes}
                                                                     for side, cost in (("candidate", c.candidate),
                                                                                        ("reference", c.reference))}}
                                   for c in done]}


def hit_agreement(sim: list[Comparison], engine: list[Comparison]) -> list[dict[str, Any]]:
    """Per request and policy side, the hit tokens the sim and the engine tier observed (both ran)."""
    rows: list[dict[str, Any]] = []
    for s, e in zip(sim, engine, strict=True):
        if s.candidate is None or e.candidate is None:
            continue
        for side in ("candidate", "reference"):
            s_cost, e_cost = getattr(s, side), getattr(e, side)
            for rid, r in sorted(s_cost.requests.items()):
                engine_hit = e_cost.requests[rid].hit_tokens if rid in e_cost.requests else None
                rows.append({"name": s.name, "side": side, "request": rid, "sim": r.hit_tokens,
                             "engine": engine_hit, "agree": engine_hit == r.hit_tokens})
    return rows
