"""``report.md``: the human-readable report of one finding (what diverged, the guilty request's
chunks, the replay command, the minimization's stages)."""

from __future__ import annotations

import shlex
from pathlib import Path

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


def render_report(f: Finding, bundle: Path) -> str:
    first = f.verdict.first
    assert first is not None
    size_before, size_after = scenario_summary(f.original), scenario_summary(f.minimized)
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in f.verdict.findings)
    stages = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    return f"""# {f.signature}

**{first.summary}** — candidate `{f.candidate}` against reference `{f.reference}` on the {f.tier} tier.
First divergent request: `{first.request_id}`, step {first.step}; the wrong side: {first.side}.

Engine: B={e.mamba_block_size}, attention block {e.block_size}, hash block {e.hash_block_size}, \
budget {e.max_num_batched_tokens} (per step {list(e.step_budgets) or '-'}), spec decode {e.spec_decode} \
({e.num_spec_tokens} tokens), retention {e.retention_interval}.

## Findings
{findings}

## Chunks of `{first.request_id}` under `{f.candidate}`
{chunk_table(f.candidate_run, first.request_id)}

## Reproduce
```
{shlex.join(replay_argv(str(bundle / 'scenario.json'), f.candidate, f.reference, f.tier))}
```

## Minimization
Original: {size_before['requests']} requests, {size_before['prompt_tokens']} prompt tokens; \
minimized: {size_after['requests']} requests, {size_after['prompt_tokens']} prompt tokens, \
{len(f.candidate_run.steps)} steps.

| stage | tried | kept | seconds |
|---|---:|---:|---:|
{stages}
"""

