"""``report.md``: the human-readable report of one finding (what diverged, the evidence its class
shows, the replay command, the minimization's stages), and the one call that stores a finding with it.

Invariant: the report is a function of the :class:`~fuzz.oracle.finding.Finding`, the bundle path and the
installed vLLM (its version and code locations); the evidence section is the one the verdict's naming
class renders (``report_section``).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from fuzz.model.scenario import scenario_summary
from fuzz.oracle.evidence import side_by_side
from fuzz.oracle.finding import Finding, replay_argv
from fuzz.report.exported_test import render_test
from fuzz.report.vllm_terms import model_words, serve_command, vllm_locations, vllm_release
from fuzz.store.bundle import TEST_FILE, save_finding
from fuzz.tiers import SCHEDULER_TIER, executor_for


def render_report(f: Finding, bundle: Path) -> str:
    head = f.verdict.headline
    named = f.verdict.naming_class
    assert head is not None and named is not None
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in f.verdict.findings())
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
## In vLLM's terms
{vllm_section(f)}

## Reproduce
`{TEST_FILE}` in this directory is the finding as a pytest file that needs only vLLM and pytest: it fails
while the bug is there (`pytest {bundle / TEST_FILE}`). With gdnfuzz:
```
{shlex.join(replay_argv(str(bundle / 'scenario.json'), f.candidate, f.reference, f.tier, f.fail_on))}
```

## Minimization
{minimization(f)}"""


def minimization(f: Finding) -> str:
    """The report's minimization section: the sizes before and after and each stage, or, for a finding
    stored as found (no stages: its run ended before a minimization), that it is not minimized."""
    before, after = scenario_summary(f.original), scenario_summary(f.minimized)
    if not f.stages:
        return (f"Not minimized: stored as found ({before['requests']} requests, {before['prompt_tokens']} prompt "
                f"tokens, {len(f.candidate_run.steps)} steps); `gdnfuzz minimize` reduces it.\n")
    stages = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    return f"""Original: {before['requests']} requests, {before['prompt_tokens']} prompt tokens; \
minimized: {after['requests']} requests, {after['prompt_tokens']} prompt tokens, {len(f.candidate_run.steps)} steps.

| stage | tried | kept | seconds |
|---|---:|---:|---:|
{stages}
"""


def vllm_section(f: Finding) -> str:
    """The configuration as ``vllm serve`` flags and words, the vLLM it was found on, the code involved,
    the root cause in words, and both splits' chunks of the request it names."""
    lines = [f"```\n{serve_command(f.minimized.engine)}\n```", *[f"- {w}" for w in model_words(f.minimized.engine)],
             f"- vLLM {vllm_release()}",
             "- code: " + "; ".join(f"`{name}` (`{where}`)" for name, where in vllm_locations().items())]
    cause = f.verdict.root_cause
    if cause is not None:
        lines.append(f"- root cause: at step {cause.step}, `{cause.request_id}` was offered {cause.offered} tokens from "
                     f"{cause.start}; `{f.candidate}` scheduled {cause.candidate} where `{f.reference}` scheduled "
                     f"{cause.reference} ({cause.departure} vLLM's {cause.decider} stop"
                     + (f"; it needs {', '.join(cause.conditions)}" if cause.conditions else "") + ")")
    request = (cause.request_id if cause else None) or f.head.request_id
    if request is not None and f.reference_run is not None:
        lines += ["", f"Chunks of `{request}`, `{f.candidate}` beside `{f.reference}`:", "",
                  side_by_side(f.candidate_run, f.reference_run, request, (f.candidate, f.reference))]
    return "\n".join(lines)


def store_finding(f: Finding, crashes: Path, regressions: Path | None, replay: bool = False) -> Path:
    """Store ``f`` as its bundle with its report and its exported regression test
    (``fuzz.store.bundle.save_finding``), or count one more occurrence of its signature; returns the
    bundle directory. The test replays the scenario on the scheduler the sim tier builds."""

    def documents(bundle: Path) -> dict[str, str]:
        test = render_test(f, executor_for(SCHEDULER_TIER).configuration(f.minimized))
        return {"report.md": render_report(f, bundle), TEST_FILE: test}

    return save_finding(f, crashes, regressions, documents, replay)
