"""Markdown evidence tables for a finding's report, each a function of the runs and scenario alone."""

from __future__ import annotations

from fuzz.model.cost import run_cost
from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario


def chunk_table(run: RunResult, request_id: str | None = None, steps: set[int] | None = None) -> str:
    """Every chunk of ``request_id`` (else of every request, in ``steps``): step, budget, tokens, drafts, column,
    blocks read and written, the start state's tokens, the prefill checkpoint exported."""
    named = request_id is not None
    lines = [f"| step | {'' if named else 'request | '}budget | tokens | drafts | column | read block | wrote | "
             "state in | checkpoint |",
             f"|---:|{'' if named else '---|'}---:|---|---:|---:|---:|---|---:|---|"]
    budgets = {s.step: s.budget for s in run.steps}
    chunks = run.chunk_table(request_id) if named else [
        (s.step, c) for s in run.steps if steps is None or s.step in steps for c in s.chunks]
    for step, c in chunks:
        checkpoint = "-" if c.checkpoint_tokens is None else f"state@{c.checkpoint_tokens} -> {c.checkpoint_block}"
        lines.append(f"| {step} | {'' if named else f'`{c.request_id}` | '}{budgets[step]} | "
                     f"[{c.start}, {c.start + c.num_tokens}) | {c.num_draft_tokens} | {c.state_column} | "
                     f"{c.read_block if c.read_block is not None else '-'} | {','.join(map(str, c.write_blocks))} | "
                     f"{'-' if c.initial_state_tokens is None else c.initial_state_tokens} | {checkpoint} |")
    return "\n".join(lines) if len(lines) > 2 else "(no chunks)"


def chunk_tables(candidate: RunResult, reference: RunResult | None, request_id: str | None, step: int | None,
                 names: tuple[str, str]) -> str:
    """Both sides' chunk tables: of ``request_id``, else every request's in the three steps before ``step``."""
    shown = None if request_id is not None else set(range(max((step or 0) - 3, 0), (step or 0) + 1))
    title = f"## Chunks of `{request_id}`" if request_id is not None else \
        f"## Chunks of every request, steps {min(shown or {0})} to {step}" if step is not None else \
        "## Chunks of every request"
    sides = [(names[0], candidate)] + ([(names[1], reference)] if reference is not None else [])
    return title + "\n\n" + "\n\n".join(f"Under `{name}`:\n\n{chunk_table(run, request_id, shown)}"
                                         for name, run in sides) + "\n"


def _chunk_cells(run: RunResult, request_id: str) -> list[str]:
    return [f"{step}: [{c.start}, {c.start + c.num_tokens})" + (f" +{c.num_draft_tokens}d" if c.num_draft_tokens else "")
            for step, c in run.chunk_table(request_id)]


def side_by_side(candidate: RunResult, reference: RunResult, request_id: str, names: tuple[str, str]) -> str:
    """The request's chunks under each policy, one row per chunk, as "step: [start, end)"."""
    left, right = _chunk_cells(candidate, request_id), _chunk_cells(reference, request_id)
    lines = [f"| # | {names[0]} | {names[1]} |", "|---:|---|---|"]
    for i in range(max(len(left), len(right))):
        lines.append(f"| {i} | {left[i] if i < len(left) else ''} | {right[i] if i < len(right) else ''} |")
    return "\n".join(lines)


def cost_table(scenario: Scenario, candidate: RunResult, reference: RunResult, names: tuple[str, str]) -> str:
    """What each side paid: passes, idle budget (evidence only), per request hits, prefill chunks, first-token steps."""
    c, r = run_cost(scenario, candidate), run_cost(scenario, reference)
    lines = [f"| | `{names[0]}` | `{names[1]}` |", "|---|---:|---:|",
             f"| forward passes | {c.forward_passes} | {r.forward_passes} |",
             f"| budget left idle while prefill waited | {c.idle_budget} | {r.idle_budget} |",
             f"| cache-hit tokens (all requests) | {c.hit_tokens} | {r.hit_tokens} |",
             f"| prefill chunks (all requests) | {c.prefill_chunks} | {r.prefill_chunks} |"]
    for rid in sorted(c.requests):
        rc, rr = c.requests[rid], r.requests.get(rid)
        if rr is not None:
            lines.append(f"| `{rid}`: hit tokens / prefill chunks / steps to first token | {rc.hit_tokens} / "
                         f"{rc.prefill_chunks} / {_steps(rc.steps_to_first_token)} | {rr.hit_tokens} / "
                         f"{rr.prefill_chunks} / {_steps(rr.steps_to_first_token)} |")
    return "\n".join(lines)


def _steps(steps: int | None) -> str:
    return "-" if steps is None else str(steps)
