"""``report.md``: the human-readable report of one finding (what diverged, the guilty request's
chunks, the replay command, the minimization's stages)."""

from __future__ import annotations

import shlex
from pathlib import Path

from fuzz.model.cost import run_cost
from fuzz.model.result import RunResult
from fuzz.model.scenario import scenario_summary
from fuzz.oracle.finding import Finding, replay_argv


def chunk_table(run: RunResult, request_id: str | None) -> str:
    if request_id is None:
        return "(no request)"
    lines = ["| step | budget | tokens | drafts | column | read block | wrote | state in |",
             "|---:|---:|---|---:|---:|---:|---|---:|"]
    budgets = {s.step: s.budget for s in run.steps}
    for step, c in run.chunk_table(request_id):
        lines.append(f"| {step} | {budgets[step]} | [{c.start}, {c.start + c.num_tokens}) | {c.num_draft_tokens} | "
                     f"{c.state_column} | {c.read_block if c.read_block is not None else '-'} | "
                     f"{','.join(map(str, c.write_blocks))} | {c.initial_state_tokens} |")
    return "\n".join(lines)


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


def cost_table(f: Finding) -> str:
    """What each side paid: passes, idle budget, and per request the hit and its prefill chunks."""
    assert f.reference_run is not None
    c, r = run_cost(f.minimized, f.candidate_run), run_cost(f.minimized, f.reference_run)
    lines = [f"| | `{f.candidate}` | `{f.reference}` |", "|---|---:|---:|",
             f"| forward passes | {c.forward_passes} | {r.forward_passes} |",
             f"| budget left idle while prefill waited | {c.idle_budget} | {r.idle_budget} |",
             f"| cache-hit tokens (all requests) | {c.hit_tokens} | {r.hit_tokens} |",
             f"| prefill chunks (all requests) | {c.prefill_chunks} | {r.prefill_chunks} |"]
    for rid in sorted(c.requests):
        rc, rr = c.requests[rid], r.requests.get(rid)
        if rr is not None:
            lines.append(f"| `{rid}`: hit tokens / prefill chunks | {rc.hit_tokens} / {rc.prefill_chunks} | "
                         f"{rr.hit_tokens} / {rr.prefill_chunks} |")
    return "\n".join(lines)


def _efficiency_sections(f: Finding) -> str:
    assert f.reference_run is not None
    requests = sorted({x.request_id for x in f.verdict.efficiency if x.request_id} or set(f.candidate_run.requests))
    tables = "\n\n".join(f"### `{rid}`\n{side_by_side(f.candidate_run, f.reference_run, rid, (f.candidate, f.reference))}"
                          for rid in requests)
    return f"""## What it costs
{cost_table(f)}

## Chunks, `{f.candidate}` beside `{f.reference}`
{tables}
"""


def render_report(f: Finding, bundle: Path) -> str:
    head = f.verdict.headline
    assert head is not None
    size_before, size_after = scenario_summary(f.original), scenario_summary(f.minimized)
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in [*f.verdict.findings, *f.verdict.efficiency])
    stages = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    if f.verdict.first is None:
        where = "An efficiency regression: every slot is exact, the candidate costs the user more."
        body = _efficiency_sections(f)
    else:
        where = f"First divergent request: `{head.request_id}`, step {head.step}; the wrong side: {head.side}."
        body = f"## Chunks of `{head.request_id}` under `{f.candidate}`\n{chunk_table(f.candidate_run, head.request_id)}\n"
    return f"""# {f.signature}

**{head.summary}** — candidate `{f.candidate}` against reference `{f.reference}` on the {f.tier} tier.
{where}

Engine: B={e.mamba_block_size}, attention block {e.block_size}, hash block {e.hash_block_size}, \
budget {e.max_num_batched_tokens} (per step {list(e.step_budgets) or '-'}), spec decode {e.spec_decode} \
({e.num_spec_tokens} tokens), retention {e.retention_interval}.

## Findings
{findings}

{body}
## Reproduce
```
{shlex.join(replay_argv(str(bundle / 'scenario.json'), f.candidate, f.reference, f.tier, f.fail_on))}
```

## Minimization
Original: {size_before['requests']} requests, {size_before['prompt_tokens']} prompt tokens; \
minimized: {size_after['requests']} requests, {size_after['prompt_tokens']} prompt tokens, \
{len(f.candidate_run.steps)} steps.

| stage | tried | kept | seconds |
|---|---:|---:|---:|
{stages}
"""
