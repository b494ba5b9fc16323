"""``report.md``: the human-readable report of one finding (what diverged, the evidence its class
shows, the replay command, the minimization's stages), and the one call that stores a finding with it.

Invariant: the report is a function of the :class:`~fuzz.oracle.finding.Finding` and the bundle path
alone; the evidence section is the one the verdict's naming class renders (``report_section``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from fuzz.model.scenario import scenario_summary
from fuzz.oracle.finding import Finding, replay_argv
from fuzz.store.bundle import save_finding


def render_report(f: Finding, bundle: Path) -> str:
    head = f.verdict.headline
    named = f.verdict.naming_class
    assert head is not None and named is not None
    size_before, size_after = scenario_summary(f.original), scenario_summary(f.minimized)
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in f.verdict.findings())
    stages = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    where, body = named.report_section(f.verdict, f.minimized, f.candidate_run, f.reference_run,
                                       (f.candidate, f.reference))
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


def store_finding(f: Finding, crashes: Path, regressions: Path | None, replay: bool = False) -> Path:
    """Store ``f`` as its bundle with its report (``fuzz.store.bundle.save_finding``), or count one more
    occurrence of its signature; returns the bundle directory."""
    return save_finding(f, crashes, regressions, lambda bundle: render_report(f, bundle), replay)
